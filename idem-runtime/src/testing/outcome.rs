//! What a check reports: [`Passed`] with what it saw, or [`Failed`] with the check's name,
//! the expected answer and the seen one.

use std::fmt;

use bytes::Bytes;

use crate::protocol::flow::IDEMPOTENT_REPLAYED;

/// A check that held, and what it saw.
///
/// ```
/// # async fn check(
/// #     endpoint: idem_runtime::testing::Endpoint,
/// #     app: impl idem_runtime::testing::Target<()>,
/// # ) -> Result<(), idem_runtime::testing::Failed> {
/// let passed = endpoint.replay(&app).await?;
/// assert_eq!(passed.check(), "replay");
/// println!("{passed}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    check: &'static str,
    endpoint: String,
    seen: String,
}

impl Passed {
    pub(super) fn new(check: &'static str, endpoint: String, seen: String) -> Self {
        Self {
            check,
            endpoint,
            seen,
        }
    }

    /// The check's name: `concurrency`, `replay`, `mismatch`, `missing_key`,
    /// `transient_failure`, `crash_resume`, `expiry` or `all`.
    pub fn check(&self) -> &str {
        self.check
    }

    /// What the check saw (for `all`: which checks ran and which did not apply).
    pub fn seen(&self) -> &str {
        &self.seen
    }
}

impl fmt::Display for Passed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed for {}: {}",
            self.check, self.endpoint, self.seen
        )
    }
}

/// A check that did not hold: a test failure whose message names the check, the
/// expected answer and the seen one (statuses, headers, body excerpts, effect counts).
///
/// Its `Debug` is its message, so `endpoint.all(&app).await.unwrap()` prints it whole.
///
/// ```
/// # async fn check(
/// #     endpoint: idem_runtime::testing::Endpoint,
/// #     app: impl idem_runtime::testing::Target<()>,
/// # ) {
/// if let Err(failed) = endpoint.concurrency(&app).await {
///     assert_eq!(failed.check(), "concurrency");
///     panic!("{failed}");
/// }
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Failed {
    check: &'static str,
    endpoint: String,
    expected: String,
    seen: String,
}

impl Failed {
    pub(super) fn new(
        check: &'static str,
        endpoint: String,
        expected: impl Into<String>,
        seen: impl Into<String>,
    ) -> Self {
        Self {
            check,
            endpoint,
            expected: expected.into(),
            seen: seen.into(),
        }
    }

    /// The check that failed (see [`Passed::check`]).
    pub fn check(&self) -> &str {
        self.check
    }

    /// What the check expected.
    pub fn expected(&self) -> &str {
        &self.expected
    }

    /// What it saw instead.
    pub fn seen(&self) -> &str {
        &self.seen
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "idem::testing: {} failed for {}\n  expected: {}\n  seen: {}",
            self.check, self.endpoint, self.expected, self.seen
        )
    }
}

impl fmt::Debug for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Failed {}

/// The most bytes of a body a message quotes.
const EXCERPT: usize = 200;

/// One answer as a message shows it: status, the headers the protocol speaks in, and the
/// start of the body.
pub(super) fn describe(response: &http::Response<Bytes>) -> String {
    let mut text = response.status().as_u16().to_string();
    for name in [
        IDEMPOTENT_REPLAYED,
        http::header::LOCATION,
        http::header::RETRY_AFTER,
    ] {
        if let Some(value) = response.headers().get(&name) {
            text.push_str(&format!(
                ", {name}: {}",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
    }
    text.push_str(&format!(", body {}", excerpt(response.body())));
    text
}

/// The start of `body`, lossily as text.
pub(super) fn excerpt(body: &[u8]) -> String {
    if body.is_empty() {
        return "(empty)".to_owned();
    }
    let end = body.len().min(EXCERPT);
    let more = if body.len() > EXCERPT { "..." } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(&body[..end]))
}
