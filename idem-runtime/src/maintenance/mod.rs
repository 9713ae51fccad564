//! Keeping the key table: the expiry sweep, idem's schema and its migrations, and the
//! operator's views and repairs. Beside the store, above the protocol.

mod batches;
mod report;
mod schedule;
mod schema;
mod stranded;
mod sweep;
mod task;
mod views;

pub use report::{ExpiryStats, SweepError, SweepReport};
pub use schedule::ExpiryHandle;
pub use schema::{SchemaStatus, migrate, schema_status};
pub use stranded::{
    RecordedPhase, Resolution, ResolveError, StrandedKey, resolve_key, resolve_key_with,
    stranded_keys,
};
pub use sweep::Expiry;
pub(crate) use task::OnPanic;
pub use task::TaskHandle;
pub use views::{inspect_key, key_stats};
