//! The core's `Framework` for actix-web, and the conversions between actix-web's `http`
//! 0.2 types and the core's `http` 1.x ones.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{self, BodyLimitExceeded, BodySize, BoxBody, MessageBody};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::web::Bytes;
use actix_web::{HttpResponse, ResponseError};

use crate::protocol::config::{IntoHeaderName, IntoStatusCode};
use crate::protocol::framework::{Framework, Unbuffered};
use crate::protocol::headers::Headers;
use crate::protocol::phased::PhaseError;
use crate::protocol::problem::Problem;
use crate::protocol::webhook::WebhookRejected;

/// `Idempotent-Replayed`, in actix-web's type (the core's is `IDEMPOTENT_REPLAYED`).
const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// actix-web as the core's [`Framework`].
#[derive(Debug)]
pub(crate) struct Actix;

impl Framework for Actix {
    type Response = HttpResponse;
    type Head = HttpResponse<()>;

    fn status(response: &HttpResponse) -> http::StatusCode {
        to_http(response.status())
    }

    async fn buffer(
        response: HttpResponse,
        limit: usize,
    ) -> Result<(Self::Head, Bytes), Unbuffered> {
        let (head, body) = response.into_parts();
        // A body already in memory (what `.body(..)`, `.json(..)` and most responders
        // make) is taken as it is: `to_bytes_limited` would copy it into a new buffer,
        // a second megabyte for a 1 MiB answer until it is sent.
        let body = match body.try_into_bytes() {
            Ok(bytes) if bytes.len() > limit => return Err(Unbuffered::TooLarge),
            Ok(bytes) => return Ok((head, bytes)),
            Err(body) => body,
        };
        match body::to_bytes_limited(body, limit).await {
            Ok(Ok(bytes)) => Ok((head, bytes)),
            Ok(Err(error)) => Err(Unbuffered::Failed(error.to_string())),
            Err(BodyLimitExceeded { .. }) => Err(Unbuffered::TooLarge),
        }
    }

    fn head_status(head: &Self::Head) -> http::StatusCode {
        to_http(head.status())
    }

    fn stored_headers(head: &Self::Head, allowed: &[http::HeaderName], out: &mut Vec<u8>) {
        let headers = head.headers();
        for name in allowed {
            for value in headers.get_all(name.as_str()) {
                crate::store::push_header_line(out, name.as_str().as_bytes(), value.as_bytes());
            }
        }
    }

    fn assemble(head: Self::Head, body: Bytes) -> HttpResponse {
        head.set_body(sent_body(body))
    }

    fn problem_parts(problem: Problem) -> (Self::Head, Bytes) {
        let mut head = HttpResponse::with_body(from_http(problem.status()), ());
        let headers = head.headers_mut();
        for (name, value) in problem.headers() {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        (head, problem.into_body())
    }

    fn replay(status: http::StatusCode, headers: &[u8], body: Bytes) -> HttpResponse {
        let mut response = HttpResponse::with_body(from_http(status), sent_body(body));
        let map = response.headers_mut();
        for (name, value) in decode_headers(headers) {
            map.append(name, value);
        }
        map.insert(REPLAYED, HeaderValue::from_static("true"));
        response
    }
}

/// The largest piece of a body handed to actix-web at once: its HTTP/1 dispatcher copies
/// each piece into the connection's write buffer, and takes the next only once that
/// buffer holds less than its limit (`h1_write_buffer_size`, 32 KiB unless set).
const SLICE: usize = 32 * 1024;

/// A body that idem holds whole (a replay's, a share of the buffer the store read it
/// into; a first execution's, the handler's buffered body) as actix-web's body.
///
/// Handed over as one `Bytes`, a 1 MiB answer would be copied whole into the
/// connection's write buffer, which keeps that capacity for as long as the connection
/// stays open: a second megabyte per connection. In slices of the same buffer, the copy
/// is at most a slice at a time, and the write buffer stays at its usual size.
fn sent_body(body: Bytes) -> BoxBody {
    if body.len() > SLICE {
        BoxBody::new(Slices(body))
    } else {
        BoxBody::new(body)
    }
}

/// [`sent_body`]'s large body, yielded in `SLICE`-sized shares of its buffer.
///
/// It keeps `MessageBody::try_into_bytes`'s default (no): `BoxBody::new` and actix-web's
/// `Compress` ask for the whole buffer that way, and would hand it to the dispatcher in
/// one piece again.
struct Slices(Bytes);

impl MessageBody for Slices {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        // Known, so that the answer keeps its `Content-Length` rather than being chunked.
        BodySize::Sized(self.0.len() as u64)
    }

    fn poll_next(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Infallible>>> {
        let rest = &mut self.get_mut().0;
        if rest.is_empty() {
            return Poll::Ready(None);
        }
        let slice = rest.split_to(rest.len().min(SLICE));
        Poll::Ready(Some(Ok(slice)))
    }
}

/// The stored header block as actix-web's header names and values; lines that are not
/// valid headers are left out.
fn decode_headers(encoded: &[u8]) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
    crate::store::header_lines(encoded).filter_map(|(name, value)| {
        Some((
            HeaderName::from_bytes(name).ok()?,
            HeaderValue::from_bytes(value).ok()?,
        ))
    })
}

/// A problem as actix-web's response.
pub(crate) fn problem_response(problem: Problem) -> HttpResponse {
    Actix::problem(problem)
}

/// Both `http` versions accept the same codes (100 to 999).
fn to_http(status: StatusCode) -> http::StatusCode {
    http::StatusCode::from_u16(status.as_u16()).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
}

fn from_http(status: http::StatusCode) -> StatusCode {
    StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// `Idempotency-Key` in actix-web's `http` version.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

impl Headers for HeaderMap {
    fn lookup(&self, name: &str) -> Option<(&[u8], bool)> {
        // The names the core reads on every request, as `HeaderName`s: looked up by
        // `&str`, the map parses the name on every call (see the `http` 1.x impl).
        let mut values = match name {
            "idempotency-key" => self.get_all(IDEMPOTENCY_KEY),
            "content-type" => self.get_all(header::CONTENT_TYPE),
            "content-encoding" => self.get_all(header::CONTENT_ENCODING),
            "content-length" => self.get_all(header::CONTENT_LENGTH),
            _ => self.get_all(name),
        };
        let first = values.next()?;
        Some((first.as_bytes(), values.next().is_some()))
    }
}

/// `Idem::replay_header(actix_web::http::header::LINK)`.
impl IntoHeaderName for HeaderName {
    fn into_header_name(self) -> http::HeaderName {
        http::HeaderName::from_bytes(self.as_str().as_bytes())
            .expect("a header name of http 0.2 is one of http 1.x")
    }
}

/// `Idem::transient_statuses([actix_web::http::StatusCode::TOO_MANY_REQUESTS])`.
impl IntoStatusCode for StatusCode {
    fn into_status_code(self) -> http::StatusCode {
        to_http(self)
    }
}

impl ResponseError for PhaseError {
    fn status_code(&self) -> StatusCode {
        from_http(PhaseError::problem(self.kind()).status())
    }

    fn error_response(&self) -> HttpResponse {
        problem_response(PhaseError::problem(self.kind()))
    }
}

impl ResponseError for WebhookRejected {
    fn status_code(&self) -> StatusCode {
        from_http(self.problem().status())
    }

    fn error_response(&self) -> HttpResponse {
        problem_response(self.problem())
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::header;

    use super::*;

    /// A body already in memory is stored and sent as the very bytes the handler made.
    #[tokio::test]
    async fn buffering_a_body_in_memory_does_not_copy_it() {
        let body = Bytes::from(vec![b'x'; 1024 * 1024]);
        let response = HttpResponse::Ok().body(body.clone());
        let Ok((_, buffered)) = Actix::buffer(response, 2 * 1024 * 1024).await else {
            panic!("a body under the limit is buffered");
        };
        assert_eq!(buffered.as_ptr(), body.as_ptr());
        assert_eq!(buffered.len(), body.len());

        let response = HttpResponse::Ok().body(body);
        assert!(matches!(
            Actix::buffer(response, 1024).await,
            Err(Unbuffered::TooLarge)
        ));
    }

    #[test]
    fn headers_round_trip_in_order_with_repeats() {
        let mut head = HttpResponse::with_body(StatusCode::CREATED, ());
        let headers = head.headers_mut();
        headers.insert(header::LOCATION, HeaderValue::from_static("/orders/7"));
        headers.append(header::LINK, HeaderValue::from_static("<a>; rel=x"));
        headers.append(header::LINK, HeaderValue::from_static("<b>; rel=y"));
        headers.insert(header::SET_COOKIE, HeaderValue::from_static("s=1"));
        headers.insert(
            header::ETAG,
            HeaderValue::from_bytes(b"\"\xe9t\xe9\"").unwrap(),
        );
        let allowed = [
            http::header::LOCATION,
            http::header::LINK,
            http::header::ETAG,
        ];
        let mut encoded = Vec::new();
        Actix::stored_headers(&head, &allowed, &mut encoded);
        let decoded: Vec<_> = decode_headers(&encoded).collect();
        assert_eq!(
            decoded,
            vec![
                (header::LOCATION, HeaderValue::from_static("/orders/7")),
                (header::LINK, HeaderValue::from_static("<a>; rel=x")),
                (header::LINK, HeaderValue::from_static("<b>; rel=y")),
                (
                    header::ETAG,
                    HeaderValue::from_bytes(b"\"\xe9t\xe9\"").unwrap()
                ),
            ]
        );
    }
}
