//! The per-endpoint idempotency report: the summary the method closes with, one section per
//! mutating endpoint, for a design review or an audit trail.
//!
//! Two sources fill it: `idem audit --format report` from the application's sources, and
//! `idem::registry::report()` from the running service's registry. Each says only what it
//! can know; a line it could not tell reads so instead of guessing.
//!
//! ```
//! use std::time::Duration;
//! use idem_runtime::report::{EndpointReport, Mechanism, Tests};
//!
//! let mut report = EndpointReport::new("POST", "/orders", Mechanism::KeyTable);
//! report.scope = Some("account".into());
//! report.retention = Some(Duration::from_secs(24 * 60 * 60));
//! report.tests = Tests::Found(vec!["concurrency".into(), "replay".into()]);
//! let text = report.to_string();
//! assert!(text.starts_with("## Idempotency for POST /orders\n"));
//! assert!(text.contains("- Key scope and retention: account, 24h\n"));
//! assert!(text.contains("- Tests: concurrency, replay\n"));
//! ```

use std::fmt::{self, Display, Formatter};
use std::time::Duration;

/// How one endpoint is made safe to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// `#[idempotent]` in the single-transaction form: the key row commits with the
    /// handler's writes.
    KeyTable,
    /// `#[idempotent]` in the phased form: recorded phases, a lease, derived keys.
    Phased,
    /// `#[idempotent(store = redis)]`: recorded steps, a lease and derived keys, with the
    /// key and the steps' outputs in Redis and no database transaction.
    RedisSteps,
    /// A signed webhook whose key is the provider's event id.
    WebhookId,
    /// An `IdempotencyLayer` wrapping the route or its router.
    Layer,
    /// `#[idem::exempt("reason")]`: safe to repeat without a key, for the reason given.
    Exempt(String),
    /// Nothing protects it.
    None,
    /// The source reader could not tell which handler serves it.
    Unresolved,
}

impl Display for Mechanism {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyTable => f.write_str("Idempotency-Key table (single transaction)"),
            Self::Phased => f.write_str("phased with recovery points"),
            Self::RedisSteps => {
                f.write_str("steps with recovery points, keys in Redis (no database transaction)")
            }
            Self::WebhookId => f.write_str("webhook id"),
            Self::Layer => f.write_str("Idempotency-Key table (IdempotencyLayer)"),
            Self::Exempt(reason) => write!(f, "exempt: {reason}"),
            Self::None => f.write_str("none"),
            Self::Unresolved => f.write_str("unresolved (the handler could not be read)"),
        }
    }
}

/// Which of the verification checks the application's tests run for an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Tests {
    /// The source does not tell (a running service cannot see its tests).
    #[default]
    Unknown,
    /// The checks found, by name (`concurrency`, `replay`, ...); empty when none were.
    Found(Vec<String>),
}

/// One phase's downstream key: the phase's name and the format of the key it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamKey {
    /// The phase's name, as the handler records it.
    pub phase: String,
    /// The key's format, such as `{key}:charge`.
    pub format: String,
}

/// The report of one endpoint; `Display` renders it as a Markdown section.
///
/// A field left `None` (or empty) is a fact the source could not tell, and is printed as
/// such, so a reader never takes a gap for an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointReport {
    /// The HTTP method, upper case; empty when it is not known (a handler whose route
    /// the registry could not see), and the heading then names the path alone.
    pub method: String,
    /// The route's path pattern, or the handler's name when the path is not known.
    pub path: String,
    /// How it is protected.
    pub mechanism: Mechanism,
    /// The name of the scope (the parameter or the kind of caller).
    pub scope: Option<String>,
    /// How long a completed key is kept and replayed.
    pub retention: Option<Duration>,
    /// What the fingerprint covers; `None` for the mechanism's default.
    pub fingerprint: Option<String>,
    /// The downstream keys of the handler's phases; `None` when they cannot be seen.
    pub downstream: Option<Vec<DownstreamKey>>,
    /// The verification checks the application's tests run for it.
    pub tests: Tests,
}

impl EndpointReport {
    /// A report of `method path` protected by `mechanism`, with every other fact unknown.
    ///
    /// ```
    /// use idem_runtime::report::{EndpointReport, Mechanism};
    ///
    /// let report = EndpointReport::new("PUT", "/carts/{id}", Mechanism::Exempt("PUT by id".into()));
    /// assert!(report.to_string().contains("- Mechanism: exempt: PUT by id\n"));
    /// ```
    pub fn new(method: impl Into<String>, path: impl Into<String>, mechanism: Mechanism) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            mechanism,
            scope: None,
            retention: None,
            fingerprint: None,
            downstream: None,
            tests: Tests::Unknown,
        }
    }

    fn protected(&self) -> bool {
        matches!(
            self.mechanism,
            Mechanism::KeyTable
                | Mechanism::Phased
                | Mechanism::RedisSteps
                | Mechanism::WebhookId
                | Mechanism::Layer
        )
    }

    fn default_fingerprint(&self) -> &'static str {
        match self.mechanism {
            Mechanism::WebhookId => "signed webhook id and raw body",
            _ => {
                "method, path, query parameters, decoded body (canonical JSON, form fields, or bytes by its Content-Type)"
            }
        }
    }
}

/// Renders a duration the way `retention = ".."` is written: `24h`, `30m`, `7d`, `90s`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(idem_runtime::report::duration(Duration::from_secs(86_400)), "24h");
/// assert_eq!(idem_runtime::report::duration(Duration::from_secs(90)), "90s");
/// ```
pub fn duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    // Hours before days: retention is usually said in hours ("24h", "48h") up to a week.
    match secs {
        0 => format!("{}ms", duration.as_millis()),
        s if s % 86_400 == 0 && s > 7 * 86_400 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

impl Display for EndpointReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.method.is_empty() {
            writeln!(f, "## Idempotency for {}", self.path)?;
        } else {
            writeln!(f, "## Idempotency for {} {}", self.method, self.path)?;
        }
        writeln!(f, "- Mechanism: {}", self.mechanism)?;
        if !self.protected() {
            // An exempt or unprotected endpoint has no key, so the key lines would only
            // repeat "none"; the tests line still says whether anything verifies it.
            return write_tests(f, &self.tests);
        }
        let scope = self.scope.as_deref().unwrap_or("not known");
        match self.retention {
            Some(retention) => writeln!(
                f,
                "- Key scope and retention: {scope}, {}",
                duration(retention)
            )?,
            None => writeln!(f, "- Key scope and retention: {scope}, retention not known")?,
        }
        let fingerprint = self
            .fingerprint
            .as_deref()
            .unwrap_or_else(|| self.default_fingerprint());
        writeln!(f, "- Fingerprint: {fingerprint}")?;
        writeln!(
            f,
            "- Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing"
        )?;
        match &self.downstream {
            None => writeln!(f, "- Downstream keys: not known from this source")?,
            Some(keys) if keys.is_empty() => writeln!(f, "- Downstream keys: none")?,
            Some(keys) => {
                let keys: Vec<_> = keys
                    .iter()
                    .map(|key| format!("{}: {}", key.phase, key.format))
                    .collect();
                writeln!(f, "- Downstream keys: {}", keys.join(", "))?;
            }
        }
        write_tests(f, &self.tests)
    }
}

fn write_tests(f: &mut Formatter<'_>, tests: &Tests) -> fmt::Result {
    match tests {
        Tests::Unknown => writeln!(
            f,
            "- Tests: not known from this source (run `idem audit --format report`)"
        ),
        Tests::Found(checks) if checks.is_empty() => writeln!(f, "- Tests: none found"),
        Tests::Found(checks) => writeln!(f, "- Tests: {}", checks.join(", ")),
    }
}

/// Renders `reports` one section after another, separated by a blank line.
///
/// ```
/// use idem_runtime::report::{EndpointReport, Mechanism, render};
///
/// let text = render(&[
///     EndpointReport::new("POST", "/orders", Mechanism::KeyTable),
///     EndpointReport::new("DELETE", "/orders/{id}", Mechanism::None),
/// ]);
/// assert!(text.contains("\n\n## Idempotency for DELETE /orders/{id}\n"));
/// ```
pub fn render(reports: &[EndpointReport]) -> String {
    reports
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_report_has_every_line_in_order() {
        let mut report = EndpointReport::new("POST", "/payments", Mechanism::Phased);
        report.scope = Some("account".into());
        report.retention = Some(Duration::from_secs(48 * 3_600));
        report.downstream = Some(vec![DownstreamKey {
            phase: "charge".into(),
            format: "{key}:charge".into(),
        }]);
        report.tests = Tests::Found(vec![]);
        let lines: Vec<_> = report.to_string().lines().map(str::to_owned).collect();
        assert_eq!(lines[0], "## Idempotency for POST /payments");
        assert_eq!(lines[1], "- Mechanism: phased with recovery points");
        assert_eq!(lines[2], "- Key scope and retention: account, 48h");
        assert!(lines[3].starts_with("- Fingerprint: method, path"));
        assert!(lines[4].starts_with("- Responses: replay (Idempotent-Replayed: true)"));
        assert_eq!(lines[5], "- Downstream keys: charge: {key}:charge");
        assert_eq!(lines[6], "- Tests: none found");
        assert_eq!(lines.len(), 7);
    }

    #[test]
    fn an_unknown_fact_is_said_to_be_unknown() {
        let text = EndpointReport::new("POST", "/x", Mechanism::KeyTable).to_string();
        assert!(text.contains("- Key scope and retention: not known, retention not known\n"));
        assert!(text.contains("- Downstream keys: not known from this source\n"));
        assert!(text.contains("- Tests: not known from this source"));
    }

    #[test]
    fn an_unknown_method_leaves_the_path_alone_in_the_heading() {
        let text = EndpointReport::new("", "shop::carts::put_cart", Mechanism::None).to_string();
        assert!(text.starts_with("## Idempotency for shop::carts::put_cart\n"));
    }

    #[test]
    fn durations_read_as_written() {
        assert_eq!(duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(duration(Duration::from_secs(1_800)), "30m");
        assert_eq!(duration(Duration::from_secs(61)), "61s");
    }
}
