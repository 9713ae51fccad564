//! What the running service knows of its endpoints: every `#[idempotent]` handler and
//! `IdempotencyLayer` ([`policies`]), every `#[idem::exempt("..")]` handler
//! ([`exemptions`]), and both as the per-endpoint report ([`report`]).
//!
//! ```
//! use idem_runtime::registry;
//!
//! // At startup, for the logs or an operator's page.
//! let text = idem_runtime::report::render(&registry::report());
//! # let _ = text;
//! for exemption in registry::exemptions() {
//!     println!("{} is exempt: {}", exemption.handler(), exemption.reason());
//! }
//! ```

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::protocol::policy::Policy;
use crate::report::{EndpointReport, Mechanism, Tests};

/// One handler's entry in the registry; submitted by the code `#[idempotent]` generates.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static Policy);

inventory::collect!(Registration);

/// One exempt handler's entry in the registry; submitted by the code `#[idem::exempt]`
/// generates.
#[doc(hidden)]
#[derive(Debug)]
pub struct Exempted(pub Exemption);

inventory::collect!(Exempted);

/// A handler marked `#[idem::exempt("reason")]`: it mutates, takes no key, and is safe
/// to repeat for the reason given (a PUT by a client-chosen id, an upsert on a natural
/// key, a DELETE whose repeat answers 404).
///
/// ```
/// use idem_runtime::registry::Exemption;
///
/// static CART: Exemption =
///     Exemption::new("put_cart", "shop::carts", "PUT by client-chosen id").with_route("PUT", "/carts/{id}");
/// assert_eq!(CART.reason(), "PUT by client-chosen id");
/// assert_eq!(CART.route(), Some(("PUT", "/carts/{id}")));
/// ```
#[derive(Debug)]
pub struct Exemption {
    handler: &'static str,
    module_path: &'static str,
    reason: &'static str,
    route: Option<(&'static str, &'static str)>,
}

impl Exemption {
    /// The exemption of `handler` in `module_path`, for `reason`; the attribute builds
    /// one per handler.
    pub const fn new(
        handler: &'static str,
        module_path: &'static str,
        reason: &'static str,
    ) -> Self {
        Self {
            handler,
            module_path,
            reason,
            route: None,
        }
    }

    /// The same exemption with the route's method and path, when the attribute can see
    /// them (written above the route attribute).
    pub const fn with_route(self, method: &'static str, path: &'static str) -> Self {
        Self {
            route: Some((method, path)),
            ..self
        }
    }

    /// The handler function's name.
    pub fn handler(&self) -> &'static str {
        self.handler
    }

    /// The module the handler is defined in.
    pub fn module_path(&self) -> &'static str {
        self.module_path
    }

    /// Why a repeat of the request is safe without a key, as the attribute says.
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// The route's method and path pattern, if the attribute could see them.
    pub fn route(&self) -> Option<(&'static str, &'static str)> {
        self.route
    }
}

/// The policies of all `#[idempotent]` handlers in the program, sorted by module and
/// handler name: which endpoints are idempotent, how their keys are scoped and how long
/// they are kept. Log them at startup so operators can see them. The policies of the
/// `IdempotencyLayer`s (feature `axum`) the program has built so far are among them.
///
/// ```
/// for policy in idem_runtime::registry::policies() {
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
    let mut all = linked_policies();
    all.extend(at_run_time().iter().copied());
    all.sort_by_key(|policy| (policy.module_path(), policy.handler()));
    all
}

/// The policies of the attributes, collected when the program was linked.
fn linked_policies() -> Vec<&'static Policy> {
    inventory::iter::<Registration>
        .into_iter()
        .map(|registration| registration.0)
        .collect()
}

/// Every `#[idem::exempt("..")]` handler in the program, sorted by module and handler
/// name.
///
/// ```
/// for exemption in idem_runtime::registry::exemptions() {
///     println!(
///         "{}::{} exempt ({}) route={:?}",
///         exemption.module_path(),
///         exemption.handler(),
///         exemption.reason(),
///         exemption.route(),
///     );
/// }
/// ```
pub fn exemptions() -> Vec<&'static Exemption> {
    let mut all: Vec<_> = inventory::iter::<Exempted>
        .into_iter()
        .map(|exempted| &exempted.0)
        .collect();
    all.sort_by_key(|exemption| (exemption.module_path(), exemption.handler()));
    all
}

/// The per-endpoint report of every endpoint the registry knows: the idempotent handlers,
/// the layers built so far and the exempt handlers, sorted by path, then method.
///
/// An endpoint whose route the attribute could not see (written below the route
/// attribute, an axum handler, a layer) is named by its handler's path,
/// `module::handler`, with its method left empty. What only the sources tell (the
/// downstream keys of the phases, the tests that verify the endpoint) is reported as not
/// known; `idem audit --format report` reads those from the sources.
///
/// ```
/// use idem_runtime::{registry, report};
///
/// let markdown = report::render(&registry::report());
/// # let _ = markdown;
/// ```
pub fn report() -> Vec<EndpointReport> {
    let layers = at_run_time().clone();
    let mut reports: Vec<_> = linked_policies()
        .into_iter()
        .map(|policy| policy_report(policy, false))
        .chain(layers.into_iter().map(|policy| policy_report(policy, true)))
        .chain(exemptions().into_iter().map(exemption_report))
        .collect();
    reports.sort_by(|a, b| (&a.path, &a.method).cmp(&(&b.path, &b.method)));
    reports
}

fn policy_report(policy: &Policy, layer: bool) -> EndpointReport {
    // A webhook's key beats the layer: it says where the key comes from, which is what
    // the reader of a webhook receiver's report needs to know first.
    let mechanism = if policy.keys_in_redis() {
        Mechanism::RedisSteps
    } else if policy.lease().is_some() {
        Mechanism::Phased
    } else if policy.key_source().is_some() {
        Mechanism::WebhookId
    } else if layer {
        Mechanism::Layer
    } else {
        Mechanism::KeyTable
    };
    let mut report = endpoint(
        policy.route(),
        policy.module_path(),
        policy.handler(),
        mechanism,
    );
    report.scope = Some(policy.scope().to_owned());
    report.retention = Some(policy.retention());
    report
}

fn exemption_report(exemption: &Exemption) -> EndpointReport {
    endpoint(
        exemption.route(),
        exemption.module_path(),
        exemption.handler(),
        Mechanism::Exempt(exemption.reason().to_owned()),
    )
}

fn endpoint(
    route: Option<(&str, &str)>,
    module_path: &str,
    handler: &str,
    mechanism: Mechanism,
) -> EndpointReport {
    let mut report = match route {
        Some((method, path)) => EndpointReport::new(method, path, mechanism),
        None => EndpointReport::new("", format!("{module_path}::{handler}"), mechanism),
    };
    // A running service cannot see its tests.
    report.tests = Tests::Unknown;
    report
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::protocol::key::KeySource;

    static PHASED: Policy = Policy::new("pay", "shop", "account", 86_400).with_lease(30_000);
    static HOOK: Policy =
        Policy::new("hook", "shop", "sender", 86_400).with_key(KeySource::Header("webhook-id"));
    static PLAIN: Policy =
        Policy::new("order", "shop", "account", 172_800).with_route("POST", "/orders");
    static IN_REDIS: Policy = Policy::new("notify", "shop", "account", 86_400)
        .with_lease(3_000)
        .with_keys_in_redis();

    #[test]
    fn each_policy_reports_its_mechanism() {
        assert_eq!(policy_report(&PHASED, false).mechanism, Mechanism::Phased);
        // A lease too, but the keys are in Redis: the report must not say a database
        // transaction protects it.
        assert_eq!(
            policy_report(&IN_REDIS, false).mechanism,
            Mechanism::RedisSteps
        );
        assert_eq!(policy_report(&HOOK, true).mechanism, Mechanism::WebhookId);
        assert_eq!(policy_report(&PLAIN, true).mechanism, Mechanism::Layer);
        let plain = policy_report(&PLAIN, false);
        assert_eq!(plain.mechanism, Mechanism::KeyTable);
        assert_eq!(
            (plain.method.as_str(), plain.path.as_str()),
            ("POST", "/orders")
        );
        assert_eq!(plain.scope.as_deref(), Some("account"));
        assert_eq!(plain.retention, Some(Duration::from_secs(172_800)));
    }

    #[test]
    fn a_handler_without_a_route_is_named_by_its_path() {
        let report = policy_report(&PHASED, false);
        assert_eq!(
            (report.method.as_str(), report.path.as_str()),
            ("", "shop::pay")
        );
    }
}
