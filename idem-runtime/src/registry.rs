//! Every `#[idempotent]` handler linked into the program, listed at run time.

use crate::protocol::policy::Policy;

/// One handler's entry in the registry; submitted by the code `#[idempotent]` generates.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static Policy);

inventory::collect!(Registration);

/// The policies of all `#[idempotent]` handlers in the program, sorted by module and
/// handler name: which endpoints are idempotent, how their keys are scoped and how long
/// they are kept. Log them at startup so operators can see them.
///
/// ```
/// for policy in idem_runtime::policies() {
///     println!(
///         "{}::{} scope={} retention={:?} route={:?}",
///         policy.module_path(),
///         policy.handler(),
///         policy.scope(),
///         policy.retention(),
///         policy.route(),
///     );
/// }
/// ```
pub fn policies() -> Vec<&'static Policy> {
    let mut all: Vec<_> = inventory::iter::<Registration>
        .into_iter()
        .map(|registration| registration.0)
        .collect();
    all.sort_by_key(|policy| (policy.module_path(), policy.handler()));
    all
}
