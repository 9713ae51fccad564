//! A [reqwest-middleware](https://docs.rs/reqwest-middleware) middleware for calling
//! idempotent endpoints (such as those [idem](https://docs.rs/idem) serves) safely.
//!
//! [`IdempotencyMiddleware`] gives each logical request one `Idempotency-Key` and sends
//! that same key on every retry of it, so the server runs the operation once however
//! often the network makes the client try:
//!
//! - `POST` and `PATCH` requests get a fresh UUID v4 key unless the caller set one.
//! - `409 Conflict` with `Retry-After` (idem's "still in progress") is retried after the
//!   delay the server asked for, up to [`max_retry_after`](IdempotencyMiddleware::max_retry_after).
//! - Transient failures are retried with exponential backoff and jitter: connection
//!   errors, timeouts, `408`, `429` with `Retry-After`, and every `5xx` except
//!   `501 Not Implemented` (a `Retry-After` on them is honoured as a minimum).
//! - Nothing else is retried: in particular not `422` (the key was used for a different
//!   request: retrying cannot help) and no other `4xx`.
//! - A request whose body cannot be cloned (a stream) is sent once, with its key.
//!
//! When the retries run out, the last response (or error) is returned as it came.
//!
//! ```no_run
//! # async fn demo() -> Result<(), reqwest_middleware::Error> {
//! let client = idem_client::client(reqwest::Client::new());
//! let response = client
//!     .post("http://127.0.0.1:8080/orders")
//!     .header("content-type", "application/json")
//!     .body(r#"{"item":"widget","quantity":1,"amount_cents":1299}"#)
//!     .send()
//!     .await?;
//! println!("{} (replayed: {:?})", response.status(), response.headers().get("idempotent-replayed"));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use http::Extensions;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Request, Response, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_retry::{RetryDecision, Retryable, default_on_request_failure};

pub use reqwest_retry::policies::ExponentialBackoff;
pub use reqwest_retry::{Jitter, RetryPolicy};

/// The request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// A client with [`IdempotencyMiddleware::new`] in front of `client`.
///
/// ```
/// let client: reqwest_middleware::ClientWithMiddleware =
///     idem_client::client(reqwest::Client::new());
/// ```
pub fn client(client: reqwest::Client) -> ClientWithMiddleware {
    ClientBuilder::new(client)
        .with(IdempotencyMiddleware::new())
        .build()
}

/// Sends one `Idempotency-Key` per logical request and retries it safely; see the
/// [crate documentation](crate) for what is retried.
///
/// Put it first in the middleware chain, so every retry passes through the middlewares
/// after it (tracing, authentication) again.
///
/// ```
/// use std::time::Duration;
/// use idem_client::{ExponentialBackoff, IdempotencyMiddleware, Jitter};
///
/// let policy = ExponentialBackoff::builder()
///     .retry_bounds(Duration::from_millis(50), Duration::from_secs(2))
///     .jitter(Jitter::Bounded)
///     .build_with_max_retries(5);
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(IdempotencyMiddleware::with_policy(policy).max_retry_after(Duration::from_secs(5)))
///     .build();
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyMiddleware<P = ExponentialBackoff> {
    policy: P,
    max_retry_after: Duration,
}

impl IdempotencyMiddleware {
    /// Up to 3 retries, backoff from 100 ms doubling up to 5 s with bounded jitter, and
    /// a `Retry-After` of at most 10 s honoured.
    ///
    /// ```
    /// let middleware = idem_client::IdempotencyMiddleware::new();
    /// ```
    pub fn new() -> Self {
        Self::with_policy(
            ExponentialBackoff::builder()
                .retry_bounds(Duration::from_millis(100), Duration::from_secs(5))
                .jitter(Jitter::Bounded)
                .build_with_max_retries(3),
        )
    }
}

impl Default for IdempotencyMiddleware {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: RetryPolicy> IdempotencyMiddleware<P> {
    /// Retries as `policy` decides: how many times, and the backoff before each retry
    /// of a transient failure. A `409` or `429` waits for its `Retry-After` instead, but
    /// still counts as a retry.
    ///
    /// ```
    /// use idem_client::{ExponentialBackoff, IdempotencyMiddleware};
    ///
    /// let middleware =
    ///     IdempotencyMiddleware::with_policy(ExponentialBackoff::builder().build_with_max_retries(10));
    /// ```
    pub fn with_policy(policy: P) -> Self {
        Self {
            policy,
            max_retry_after: Duration::from_secs(10),
        }
    }

    /// The longest `Retry-After` the middleware waits for (10 s by default). A response
    /// asking for a longer wait is returned to the caller instead of retried.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let middleware = idem_client::IdempotencyMiddleware::new().max_retry_after(Duration::from_secs(30));
    /// ```
    pub fn max_retry_after(mut self, limit: Duration) -> Self {
        self.max_retry_after = limit;
        self
    }
}

/// What an attempt's result calls for.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Return it to the caller.
    Final,
    /// Retry after exactly this delay, which the server asked for.
    After(Duration),
    /// Retry after the policy's backoff, or the server's `Retry-After` if that is longer.
    Backoff { at_least: Option<Duration> },
}

fn classify(result: &reqwest_middleware::Result<Response>) -> Verdict {
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            return match default_on_request_failure(error) {
                Some(Retryable::Transient) => Verdict::Backoff { at_least: None },
                _ => Verdict::Final,
            };
        }
    };
    let retry_after = retry_after(response.headers());
    match response.status() {
        // idem's "a request with this key is in progress"; without Retry-After a 409 is a
        // real conflict that no retry resolves. A 429 without it gives no safe pace.
        StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS => {
            retry_after.map_or(Verdict::Final, Verdict::After)
        }
        StatusCode::REQUEST_TIMEOUT => Verdict::Backoff {
            at_least: retry_after,
        },
        // Will never work, however often it is tried.
        StatusCode::NOT_IMPLEMENTED => Verdict::Final,
        status if status.is_server_error() => Verdict::Backoff {
            at_least: retry_after,
        },
        _ => Verdict::Final,
    }
}

/// `Retry-After` as delay-seconds or an HTTP date (a date in the past is no delay).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(SystemTime::now()).unwrap_or_default())
}

/// Whether a request's method gets a key: the methods that are not idempotent by HTTP's
/// own definition.
fn needs_key(method: &Method) -> bool {
    *method == Method::POST || *method == Method::PATCH
}

#[async_trait::async_trait]
impl<P: RetryPolicy + fmt::Debug + Send + Sync + 'static> Middleware for IdempotencyMiddleware<P> {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if needs_key(req.method()) && !req.headers().contains_key(IDEMPOTENCY_KEY) {
            let key = uuid::Uuid::new_v4().hyphenated().to_string();
            let value = HeaderValue::from_str(&key).expect("a UUID is a valid header value");
            req.headers_mut().insert(IDEMPOTENCY_KEY, value);
        }
        if req.try_clone().is_none() {
            tracing::debug!(url = %req.url(), "streaming request body: sent once, not retried");
            return next.run(req, extensions).await;
        }
        let started = SystemTime::now();
        let mut retries = 0;
        loop {
            let attempt = req
                .try_clone()
                .expect("the body was cloneable a moment ago");
            let result = next.clone().run(attempt, extensions).await;
            let verdict = classify(&result);
            if verdict == Verdict::Final {
                return result;
            }
            let backoff = match self.policy.should_retry(started, retries) {
                RetryDecision::Retry { execute_after } => execute_after
                    .duration_since(SystemTime::now())
                    .unwrap_or_default(),
                RetryDecision::DoNotRetry => return result,
            };
            let delay = match verdict {
                Verdict::After(asked)
                | Verdict::Backoff {
                    at_least: Some(asked),
                } if asked > self.max_retry_after => {
                    return result;
                }
                Verdict::After(asked) => asked,
                Verdict::Backoff { at_least } => at_least.map_or(backoff, |a| a.max(backoff)),
                Verdict::Final => unreachable!("returned above"),
            };
            tracing::debug!(
                url = %req.url(),
                status = result.as_ref().ok().map(|r| r.status().as_u16()),
                retry = retries + 1,
                delay_ms = delay.as_millis() as u64,
                "retrying with the same Idempotency-Key"
            );
            // Free the connection before waiting.
            drop(result);
            tokio::time::sleep(delay).await;
            retries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, retry_after: Option<&str>) -> reqwest_middleware::Result<Response> {
        let mut builder = http::Response::builder().status(status);
        if let Some(value) = retry_after {
            builder = builder.header(RETRY_AFTER, value);
        }
        Ok(Response::from(builder.body("").expect("response")))
    }

    #[test]
    fn statuses_are_classified_as_the_protocol_needs() {
        let second = Duration::from_secs(1);
        let one = Some(second);
        assert_eq!(classify(&response(201, None)), Verdict::Final);
        assert_eq!(classify(&response(409, Some("1"))), Verdict::After(second));
        assert_eq!(classify(&response(409, None)), Verdict::Final);
        assert_eq!(classify(&response(422, Some("1"))), Verdict::Final);
        assert_eq!(classify(&response(400, None)), Verdict::Final);
        assert_eq!(classify(&response(429, Some("1"))), Verdict::After(second));
        assert_eq!(classify(&response(429, None)), Verdict::Final);
        let backoff = Verdict::Backoff { at_least: None };
        assert_eq!(classify(&response(408, None)), backoff);
        assert_eq!(classify(&response(500, None)), backoff);
        assert_eq!(
            classify(&response(503, Some("1"))),
            Verdict::Backoff { at_least: one }
        );
        assert_eq!(classify(&response(501, None)), Verdict::Final);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), None);
    }
}
