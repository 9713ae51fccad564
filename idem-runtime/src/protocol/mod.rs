//! The protocol core, free of any web framework and of any database's SQL: key parsing,
//! the request fingerprint, the policy of each handler, the claim / execute / record
//! state machine of both forms, outcomes as an enum and answers as problem values. It
//! speaks `http` 1.x and `bytes` types; a framework's adapter (`crate::actix`) hands it a
//! request through [`Headers`] and an [`exchange::Exchange`], and turns its answers into
//! the framework's responses through [`framework::Framework`].

pub(crate) mod config;
/// Marks a sealed stored value (the format `encryption.rs` describes): `0xFF` never
/// starts UTF-8 text, so no header block and no text body stored before encryption was
/// turned on looks sealed. Known without the feature too, since a table can hold values
/// sealed by another build of the application.
pub(crate) const SEALED_MARKER: &[u8; 6] = b"\xffidem1";

/// How a sealed phase output begins as stored: a JSON string (the column holds JSON)
/// whose text begins with NUL, which no output serialized before encryption was turned
/// on is likely to, then the sealed value in base64 and the closing quote.
pub(crate) const SEALED_OUTPUT: &str = "\"\\u0000idem-sealed1:";

#[cfg(feature = "encryption")]
pub mod encryption;
#[cfg(not(feature = "encryption"))]
#[path = "encryption_off.rs"]
pub(crate) mod encryption;
pub(crate) mod exchange;
pub(crate) mod fingerprint;
pub(crate) mod flow;
pub(crate) mod framework;
pub(crate) mod headers;
pub(crate) mod in_flight;
pub(crate) mod key;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
pub(crate) mod metrics;
pub(crate) mod outcome;
pub mod phased;
pub(crate) mod policy;
pub mod problem;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod scope;
pub(crate) mod tx;
pub(crate) mod webhook;

pub use headers::Headers;
