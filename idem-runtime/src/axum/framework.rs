//! The core's `Framework` for axum's `Response`.

use ::axum::body::Body;
use ::axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::header::{HeaderName, HeaderValue};
use http::response::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::protocol::flow::IDEMPOTENT_REPLAYED;
use crate::protocol::framework::{Framework, Unbuffered};
use crate::protocol::phased::PhaseError;
use crate::protocol::problem::Problem;
use crate::protocol::webhook::WebhookRejected;

/// axum as the core's [`Framework`].
#[derive(Debug)]
pub(crate) struct Axum;

impl Framework for Axum {
    type Response = Response;
    type Head = Parts;

    fn status(response: &Response) -> StatusCode {
        response.status()
    }

    async fn buffer(response: Response, limit: usize) -> Result<(Parts, Bytes), Unbuffered> {
        let (head, body) = response.into_parts();
        read_limited(body, limit).await.map(|bytes| (head, bytes))
    }

    fn head_status(head: &Parts) -> StatusCode {
        head.status
    }

    fn stored_headers(head: &Parts, allowed: &[HeaderName], out: &mut Vec<u8>) {
        for name in allowed {
            for value in head.headers.get_all(name) {
                crate::store::push_header_line(out, name.as_str().as_bytes(), value.as_bytes());
            }
        }
    }

    fn assemble(head: Parts, body: Bytes) -> Response {
        Response::from_parts(head, Body::from(body))
    }

    fn problem_parts(problem: Problem) -> (Parts, Bytes) {
        let mut response = Response::new(());
        *response.status_mut() = problem.status();
        let headers = response.headers_mut();
        for (name, value) in problem.headers() {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let (head, ()) = response.into_parts();
        (head, problem.into_body())
    }

    fn replay(status: StatusCode, headers: &[u8], body: Bytes) -> Response {
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        let map = response.headers_mut();
        // Lines that are not valid headers are left out, as the actix-web adapter does.
        for (name, value) in crate::store::header_lines(headers) {
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                map.append(name, value);
            }
        }
        map.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        response
    }
}

/// Reads `body` into memory, up to `limit` bytes. axum's own `to_bytes` reports the limit
/// and a failed stream as one error; the core answers them differently (413 or 500, and
/// for a response, whether its writes were kept).
pub(crate) async fn read_limited(body: Body, limit: usize) -> Result<Bytes, Unbuffered> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(Unbuffered::TooLarge),
        Err(error) => Err(Unbuffered::Failed(error.to_string())),
    }
}

/// A problem as axum's response.
pub(crate) fn problem_response(problem: Problem) -> Response {
    Axum::problem(problem)
}

/// The problem response for the kind, so a handler's error type can wrap a `PhaseError`
/// and answer it as idem would.
impl IntoResponse for PhaseError {
    fn into_response(self) -> Response {
        problem_response(PhaseError::problem(self.kind()))
    }
}

impl IntoResponse for WebhookRejected {
    fn into_response(self) -> Response {
        problem_response(self.problem())
    }
}

#[cfg(test)]
mod tests {
    use http::header;

    use super::*;

    #[test]
    fn replay_gives_back_the_allow_listed_headers_in_order_with_repeats() {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert(header::LOCATION, HeaderValue::from_static("/orders/7"));
        headers.append(header::LINK, HeaderValue::from_static("<a>; rel=x"));
        headers.append(header::LINK, HeaderValue::from_static("<b>; rel=y"));
        headers.insert(header::SET_COOKIE, HeaderValue::from_static("s=1"));
        let (head, ()) = response.into_parts();
        let mut encoded = Vec::new();
        Axum::stored_headers(&head, &[header::LOCATION, header::LINK], &mut encoded);
        let replayed = Axum::replay(StatusCode::CREATED, &encoded, Bytes::from_static(b"{}"));
        assert_eq!(replayed.status(), StatusCode::CREATED);
        let pairs: Vec<_> = replayed
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("location", "/orders/7"),
                ("link", "<a>; rel=x"),
                ("link", "<b>; rel=y"),
                ("idempotent-replayed", "true"),
            ]
        );
    }
}
