//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`),
//! so whichever exporter the application installs (Prometheus, StatsD, OpenTelemetry..)
//! receives them. Without a recorder installed they cost next to nothing; without the
//! feature, nothing at all.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | [`REQUESTS_TOTAL`] | counter | `endpoint`, `handler`, `outcome` | requests that reached idem's flow, by how it answered |
//! | [`TAKEOVERS_TOTAL`] | counter | `endpoint`, `handler` | phased attempts that took over a key whose lease ran out |
//! | [`STATEMENT_SECONDS`] | histogram | `endpoint`, `handler`, `statement` | time spent in idem's own statements, in seconds |
//! | [`STRANDED_KEYS`] | gauge | | keys in progress past their retention (an operator must resolve them), set after each expiry sweep |
//! | [`STRANDED_OLDEST_SECONDS`] | gauge | | age of the oldest of them in seconds (0 when there is none) |
//!
//! `endpoint` is the route's path pattern (e.g. `/orders`) when `#[idempotent]` could see
//! it (written above the route attribute), else the handler's name; `handler` is the
//! handler function's name. `statement` is `read` (SQLite: the key read before any write),
//! `begin`, `claim`, `take_over`, `complete` or `commit`. On SQLite the single-transaction
//! form sends its claim with the `BEGIN`, and its `claim` includes the `begin` (and the
//! wait for the write lock).
//!
//! The outcomes, the same strings as the `outcome` field of the `idempotent` tracing span:
//!
//! | outcome | answer |
//! |---|---|
//! | `executed` | the handler ran and its response was stored |
//! | `replayed` | a stored response was replayed |
//! | `in_progress` | 409: another request holds the key |
//! | `busy` | 503: SQLite's write lock stayed with other requests past `claim_wait`; nothing kept |
//! | `mismatch` | 422: the key was used for a different request |
//! | `invalid_key` | 400: `Idempotency-Key` missing or malformed |
//! | `invalid_body` | 400: a JSON body that does not parse |
//! | `too_large` | 500: the response is larger than idem stores; rolled back |
//! | `rolled_back` | the handler answered 5xx or a transient 4xx, or ended the transaction itself; nothing kept |
//! | `panicked` | the handler panicked |
//! | `storage_error` | the key store failed |
//! | `unreadable` | 500: a stored response does not decrypt (feature `encryption`) |
//! | `resumable` | phased: the handler answered 5xx or a transient 4xx; its committed phases are kept |
//! | `phase_failed` | phased: a phase failed in idem's part of it |
//! | `taken_over` | phased: a retry took this attempt over; its response was not stored |
// The example names the public module, which exists only with the feature; without it
// this file is the crate's no-op instrumentation and its doctest would not compile.
#![cfg_attr(
    feature = "metrics",
    doc = r#"
```
// Once at startup, after installing the exporter: units and help texts.
idem_runtime::metrics::describe();
assert_eq!(idem_runtime::metrics::REQUESTS_TOTAL, "idem_requests_total");
```
"#
)]

use crate::protocol::outcome::Outcome;
use crate::protocol::policy::Policy;

/// Counter of requests by `outcome`, with `endpoint` and `handler` labels.
///
/// ```
/// assert_eq!(idem_runtime::metrics::REQUESTS_TOTAL, "idem_requests_total");
/// ```
#[cfg(feature = "metrics")]
pub const REQUESTS_TOTAL: &str = "idem_requests_total";

/// Counter of takeovers in the phased form, with `endpoint` and `handler` labels.
///
/// ```
/// assert_eq!(idem_runtime::metrics::TAKEOVERS_TOTAL, "idem_takeovers_total");
/// ```
#[cfg(feature = "metrics")]
pub const TAKEOVERS_TOTAL: &str = "idem_takeovers_total";

/// Histogram of the seconds spent in each of idem's own statements, with `endpoint`,
/// `handler` and `statement` labels.
///
/// ```
/// assert_eq!(idem_runtime::metrics::STATEMENT_SECONDS, "idem_statement_duration_seconds");
/// ```
#[cfg(feature = "metrics")]
pub const STATEMENT_SECONDS: &str = "idem_statement_duration_seconds";

/// Gauge of the keys in progress past their retention, set after each expiry sweep.
///
/// ```
/// assert_eq!(idem_runtime::metrics::STRANDED_KEYS, "idem_stranded_keys");
/// ```
#[cfg(feature = "metrics")]
pub const STRANDED_KEYS: &str = "idem_stranded_keys";

/// Gauge of the age in seconds of the oldest key in progress past its retention.
///
/// ```
/// assert_eq!(
///     idem_runtime::metrics::STRANDED_OLDEST_SECONDS,
///     "idem_stranded_oldest_age_seconds"
/// );
/// ```
#[cfg(feature = "metrics")]
pub const STRANDED_OLDEST_SECONDS: &str = "idem_stranded_oldest_age_seconds";

/// Registers the units and descriptions of idem's metrics with the installed recorder,
/// for exporters that show them (Prometheus `# HELP` lines). Optional: the metrics are
/// recorded either way.
///
/// ```
/// idem_runtime::metrics::describe();
/// ```
#[cfg(feature = "metrics")]
pub fn describe() {
    ::metrics::describe_counter!(
        REQUESTS_TOTAL,
        ::metrics::Unit::Count,
        "Requests to idempotent endpoints, by how idem answered them"
    );
    ::metrics::describe_counter!(
        TAKEOVERS_TOTAL,
        ::metrics::Unit::Count,
        "Phased attempts that took over a key whose lease had run out"
    );
    ::metrics::describe_gauge!(
        STRANDED_KEYS,
        ::metrics::Unit::Count,
        "Keys in progress past their retention, kept for an operator to resolve"
    );
    ::metrics::describe_gauge!(
        STRANDED_OLDEST_SECONDS,
        ::metrics::Unit::Seconds,
        "Age of the oldest key in progress past its retention"
    );
    ::metrics::describe_histogram!(
        STATEMENT_SECONDS,
        ::metrics::Unit::Seconds,
        "Time spent in idem's own statements"
    );
}

/// The `endpoint` label: the route's path when known, else the handler's name.
#[cfg(feature = "metrics")]
fn endpoint(policy: &Policy) -> &'static str {
    policy.route().map_or(policy.handler(), |(_, path)| path)
}

/// Counts a request's outcome.
pub(crate) fn outcome(policy: &'static Policy, outcome: Outcome) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        REQUESTS_TOTAL,
        "endpoint" => endpoint(policy),
        "handler" => policy.handler(),
        "outcome" => outcome.as_str(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (policy, outcome);
}

/// Counts a takeover of the phased form.
pub(crate) fn takeover(policy: &'static Policy) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        TAKEOVERS_TOTAL,
        "endpoint" => endpoint(policy),
        "handler" => policy.handler(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = policy;
}

/// Sets the stranded-key gauges after a sweep.
pub(crate) fn stranded(count: u64, oldest_age: Option<std::time::Duration>) {
    #[cfg(feature = "metrics")]
    {
        // Gauges are f64; a count of keys is exact far beyond any table's size.
        #[allow(clippy::cast_precision_loss)]
        ::metrics::gauge!(STRANDED_KEYS).set(count as f64);
        ::metrics::gauge!(STRANDED_OLDEST_SECONDS)
            .set(oldest_age.map_or(0.0, |age| age.as_secs_f64()));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (count, oldest_age);
}

/// The clock of one of idem's statements: started before it runs, stopped once it has
/// answered (also when it failed). A value beside the statement's future rather than a
/// future around it, so the statement is awaited where it is built: a wrapping future
/// would take sqlx's future by value, a memcpy of its size on every statement.
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Timer {
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    /// Records the time since [`start`](Self::start) for `statement`.
    pub(crate) fn stop(self, policy: &'static Policy, statement: &'static str) {
        #[cfg(feature = "metrics")]
        ::metrics::histogram!(
            STATEMENT_SECONDS,
            "endpoint" => endpoint(policy),
            "handler" => policy.handler(),
            "statement" => statement,
        )
        .record(self.started.elapsed());
        #[cfg(not(feature = "metrics"))]
        let _ = (self, policy, statement);
    }
}

/// Awaits one of idem's statements, `timed!(policy, "name", future)`, recording how long
/// it took (also when it failed). A macro so the future is awaited in the caller's own
/// state (see [`Timer`]).
macro_rules! timed {
    ($policy:expr, $statement:literal, $run:expr) => {{
        let timer = $crate::protocol::metrics::Timer::start();
        let out = $run.await;
        timer.stop($policy, $statement);
        out
    }};
}
pub(crate) use timed;
