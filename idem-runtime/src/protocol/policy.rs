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
    keys_in_redis: bool,
}

impl Policy {
    /// The shortest retention: a day. Keys must outlive the retries of clients, which
    /// come back after timeouts and restarts; `#[idempotent]` refuses less at compile time.
    pub const MIN_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// The longest retention: 100 000 years (of 365.25 days), so that a key's expiry time
    /// stays within what both databases store.
    pub const MAX_RETENTION: Duration = Duration::from_secs(100_000 * 31_557_600);

    /// A policy for `handler` in `module_path`, scoped by the parameter named `scope`,
    /// keeping keys for `retention_secs` seconds.
    ///
    /// # Panics
    ///
    /// When the retention is under [`MIN_RETENTION`](Self::MIN_RETENTION) or over
    /// [`MAX_RETENTION`](Self::MAX_RETENTION), the bounds `#[idempotent]` checks. In a
    /// `static`, as the layer's policies are declared, that is a compile error:
    ///
    /// ```compile_fail
    /// static HOURLY: idem_runtime::Policy =
    ///     idem_runtime::Policy::new("create_order", "shop", "account", 3_600);
    /// ```
    pub const fn new(
        handler: &'static str,
        module_path: &'static str,
        scope: &'static str,
        retention_secs: u64,
    ) -> Self {
        assert!(
            retention_secs >= Self::MIN_RETENTION.as_secs(),
            "a policy's retention must be at least 24h (86_400 s): keys must outlive client \
             retries"
        );
        assert!(
            retention_secs <= Self::MAX_RETENTION.as_secs(),
            "a policy's retention must be at most 100000y: a key's expiry time must stay \
             within what the databases store"
        );
        Self {
            handler,
            module_path,
            scope,
            retention_secs,
            route: None,
            lease_ms: None,
            key: None,
            keys_in_redis: false,
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

    /// The same policy with its keys in Redis (`store = redis`): steps through
    /// `idem::redis::Steps`, and no database transaction.
    ///
    /// ```
    /// use idem_runtime::Policy;
    ///
    /// static POLICY: Policy = Policy::new("notify", "shop", "account", 86_400)
    ///     .with_lease(3_000)
    ///     .with_keys_in_redis();
    /// assert!(POLICY.keys_in_redis());
    /// ```
    pub const fn with_keys_in_redis(self) -> Self {
        Self {
            keys_in_redis: true,
            ..self
        }
    }

    /// Whether the handler's keys live in Redis rather than in its database.
    pub fn keys_in_redis(&self) -> bool {
        self.keys_in_redis
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

#[cfg(test)]
mod tests {
    use super::Policy;

    #[test]
    fn the_retention_bounds_are_the_macros() {
        let day = Policy::new("h", "m", "s", 86_400);
        assert_eq!(day.retention(), Policy::MIN_RETENTION);
        let longest = Policy::new("h", "m", "s", Policy::MAX_RETENTION.as_secs());
        assert_eq!(longest.retention(), Policy::MAX_RETENTION);
    }

    #[test]
    #[should_panic(expected = "at least 24h")]
    fn a_policy_kept_under_a_day_is_refused() {
        let _ = Policy::new("h", "m", "s", 86_399);
    }

    #[test]
    #[should_panic(expected = "at most 100000y")]
    fn a_policy_kept_past_the_longest_retention_is_refused() {
        let _ = Policy::new("h", "m", "s", Policy::MAX_RETENTION.as_secs() + 1);
    }
}
