//! Every answer of the orders routes besides success, as the parts of an RFC 9457
//! `application/problem+json` response; each binary turns a [`Problem`] into its
//! framework's response.

use std::fmt;

use super::orders::CARD_LIMIT_CENTS;

/// Where the example's problem types are described; each `type` is this plus a slug.
pub(crate) const PROBLEM_BASE: &str =
    "https://github.com/idem-rs/idem/blob/main/examples/orders/README.md#";

/// The media type of every problem answer.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// A problem answer, ready for a framework to send: its status, its body and, for a 405,
/// the `Allow` header's value.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) status: u16,
    pub(crate) allow: Option<String>,
    pub(crate) body: String,
}

impl Problem {
    /// The problem document of `slug`: `type`, `title`, `status` and `detail`, in this
    /// order, as both binaries send it.
    pub(crate) fn new(status: u16, slug: &str, title: &str, detail: &str) -> Self {
        let body = serde_json::json!({
            "type": format!("{PROBLEM_BASE}{slug}"),
            "title": title,
            "status": status,
            "detail": detail,
        });
        Self {
            status,
            allow: None,
            body: body.to_string(),
        }
    }
}

/// Everything the orders routes answer besides success.
#[derive(Debug)]
pub(crate) enum AppError {
    /// 401: no usable `X-Account-Id`.
    Unauthenticated(&'static str),
    /// 400: the body is not JSON.
    MalformedBody(String),
    /// 415: the body is not sent as JSON.
    UnsupportedMediaType,
    /// 413: the body is over the JSON limit.
    BodyTooLarge(String),
    /// 422: JSON, but not a valid order.
    InvalidOrder(String),
    /// 400: a query parameter the endpoint does not accept.
    InvalidQuery(String),
    /// 422: a webhook delivery whose JSON is not a valid event.
    InvalidEvent(String),
    /// 402: the amount is over the card limit. A business outcome, stored for replay.
    CardDeclined { amount_cents: i64 },
    /// 404: no such order for this account.
    NotFound,
    /// 405: the path exists but does not serve this method; the methods it serves.
    MethodNotAllowed(String),
    /// 500: `?fail=500` asked for it; idem rolls the insert back.
    SimulatedFailure,
    /// 500: the database failed; idem rolls everything back.
    Database(sqlx::Error),
    /// 503: `GET /health` could not reach the database.
    Unavailable(String),
}

impl AppError {
    fn slug(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::MalformedBody(_) => "malformed-body",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::BodyTooLarge(_) => "body-too-large",
            Self::InvalidOrder(_) => "invalid-order",
            Self::InvalidQuery(_) => "invalid-query",
            Self::InvalidEvent(_) => "invalid-event",
            Self::CardDeclined { .. } => "card-declined",
            Self::NotFound => "order-not-found",
            Self::MethodNotAllowed(_) => "method-not-allowed",
            Self::SimulatedFailure => "simulated-failure",
            Self::Database(_) => "internal-error",
            Self::Unavailable(_) => "database-unavailable",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "Unauthenticated",
            Self::MalformedBody(_) => "Malformed request body",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::BodyTooLarge(_) => "Request body too large",
            Self::InvalidOrder(_) => "Invalid order",
            Self::InvalidQuery(_) => "Invalid query parameter",
            Self::InvalidEvent(_) => "Invalid event",
            Self::CardDeclined { .. } => "Card declined",
            Self::NotFound => "Order not found",
            Self::MethodNotAllowed(_) => "Method not allowed",
            Self::SimulatedFailure => "Simulated failure",
            Self::Database(_) => "Internal error",
            Self::Unavailable(_) => "Database unavailable",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Unauthenticated(detail) => (*detail).to_owned(),
            Self::MalformedBody(detail)
            | Self::BodyTooLarge(detail)
            | Self::InvalidOrder(detail)
            | Self::InvalidQuery(detail)
            | Self::InvalidEvent(detail)
            | Self::Unavailable(detail) => detail.clone(),
            Self::UnsupportedMediaType => "send the order as application/json".to_owned(),
            Self::CardDeclined { amount_cents } => format!(
                "the card was declined: {amount_cents} cents is over the limit of \
                 {CARD_LIMIT_CENTS} cents"
            ),
            Self::NotFound => "there is no such order in this account".to_owned(),
            Self::MethodNotAllowed(allow) => format!("this path answers {allow} only"),
            Self::SimulatedFailure => {
                "failed after the insert, as ?fail=500 asked; nothing was saved".to_owned()
            }
            // The database's message stays in the log, not in the response.
            Self::Database(_) => "the request failed and nothing was saved; retry it".to_owned(),
        }
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated(_) => 401,
            Self::MalformedBody(_) | Self::InvalidQuery(_) => 400,
            Self::UnsupportedMediaType => 415,
            Self::BodyTooLarge(_) => 413,
            Self::InvalidOrder(_) | Self::InvalidEvent(_) => 422,
            Self::CardDeclined { .. } => 402,
            Self::NotFound => 404,
            Self::MethodNotAllowed(_) => 405,
            Self::SimulatedFailure | Self::Database(_) => 500,
            Self::Unavailable(_) => 503,
        }
    }

    /// The answer to send; a database error is logged here, since its message is not sent.
    pub(crate) fn problem(&self) -> Problem {
        if let Self::Database(error) = self {
            tracing::error!(%error, "orders: database error");
        }
        let mut problem = Problem::new(self.status(), self.slug(), self.title(), &self.detail());
        if let Self::MethodNotAllowed(allow) = self {
            problem.allow = Some(allow.clone());
        }
        problem
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Database(error) => write!(f, "database error: {error}"),
            other => f.write_str(&other.detail()),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}
