//! What one `#[idempotent]` attribute declared.

use std::time::Duration;

/// The idempotency policy of one handler, as its `#[idempotent]` attribute declared it.
///
/// The macro builds one per handler in a `static` and registers it, so
/// [`policies`](crate::policies) lists every idempotent endpoint of the application.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::Policy;
///
/// static POLICY: Policy = Policy::new("create_order", "shop::orders", "account", 86_400);
/// assert_eq!(POLICY.retention(), Duration::from_secs(24 * 60 * 60));
/// ```
#[derive(Debug)]
pub struct Policy {
    handler: &'static str,
    module_path: &'static str,
    scope: &'static str,
    retention_secs: u64,
    route: Option<(&'static str, &'static str)>,
    lease_ms: Option<u64>,
    key: Option<crate::protocol::key::KeySource>,
}

impl Policy {
    /// A policy for `handler` in `module_path`, scoped by the parameter named `scope`,
    /// keeping keys for `retention_secs` seconds.
    pub const fn new(
        handler: &'static str,
        module_path: &'static str,
        scope: &'static str,
        retention_secs: u64,
    ) -> Self {
        Self {
            handler,
            module_path,
            scope,
            retention_secs,
            route: None,
            lease_ms: None,
            key: None,
        }
    }

    /// The same policy with its key (a webhook event's id) taken from `key` instead of
    /// the `Idempotency-Key` header: `#[idempotent(key = header("webhook-id"))]`.
    pub const fn with_key(self, key: crate::protocol::key::KeySource) -> Self {
        Self {
            key: Some(key),
            ..self
        }
    }

    /// Where the key comes from when it is not the `Idempotency-Key` header.
    pub fn key_source(&self) -> Option<crate::protocol::key::KeySource> {
        self.key
    }

    /// The same policy in the phased form, with its `lease` in milliseconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_runtime::Policy;
    ///
    /// static POLICY: Policy =
    ///     Policy::new("create_payment", "shop::payments", "account", 86_400).with_lease(30_000);
    /// assert_eq!(POLICY.lease(), Some(Duration::from_secs(30)));
    /// ```
    pub const fn with_lease(self, lease_ms: u64) -> Self {
        Self {
            lease_ms: Some(lease_ms),
            ..self
        }
    }

    /// The same policy with the route's method and path, when the macro can see them:
    /// from one route attribute of a single method, written below `#[idempotent]` or
    /// above it.
    pub const fn with_route(self, method: &'static str, path: &'static str) -> Self {
        Self {
            route: Some((method, path)),
            ..self
        }
    }

    /// The route's method and path pattern, if the attribute could see them.
    pub fn route(&self) -> Option<(&'static str, &'static str)> {
        self.route
    }

    /// The handler function's name.
    pub fn handler(&self) -> &'static str {
        self.handler
    }

    /// The module the handler is defined in.
    pub fn module_path(&self) -> &'static str {
        self.module_path
    }

    /// The name of the parameter that scopes keys.
    pub fn scope(&self) -> &'static str {
        self.scope
    }

    /// How long a completed key is kept and replayed.
    pub fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_secs)
    }

    /// The phased form's lease: how long an attempt holds the key before a retry may
    /// take it over. `None` for a single-transaction handler.
    pub fn lease(&self) -> Option<Duration> {
        self.lease_ms.map(Duration::from_millis)
    }
}
