//! Every `#[idempotent]` handler linked into the program, listed at run time.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::protocol::policy::Policy;

/// One handler's entry in the registry; submitted by the code `#[idempotent]` generates.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static Policy);

inventory::collect!(Registration);

/// The policies of all `#[idempotent]` handlers in the program, sorted by module and
/// handler name: which endpoints are idempotent, how their keys are scoped and how long
/// they are kept. Log them at startup so operators can see them. The policies of the
/// `IdempotencyLayer`s (feature `axum`) the program has built so far are among them.
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
    all.extend(at_run_time().iter().copied());
    all.sort_by_key(|policy| (policy.module_path(), policy.handler()));
    all
}

/// The policies declared when the program runs rather than collected when it is linked:
/// those of the `IdempotencyLayer`s built.
static AT_RUN_TIME: Mutex<Vec<&'static Policy>> = Mutex::new(Vec::new());

fn at_run_time() -> MutexGuard<'static, Vec<&'static Policy>> {
    AT_RUN_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds `policy` to [`policies`], once however often its layer is built.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn register(policy: &'static Policy) {
    let mut known = at_run_time();
    if !known.iter().any(|other| std::ptr::eq(*other, policy)) {
        known.push(policy);
    }
}
