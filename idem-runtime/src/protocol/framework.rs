//! What the core needs from a web framework to run a handler and answer for it.

use std::future::Future;

use bytes::Bytes;
use http::{HeaderName, StatusCode};

use crate::protocol::problem::Problem;

/// A web framework's side of the protocol, implemented once per adapter (`actix/`).
///
/// The core never converts the handler's response into a type of its own: it reads its
/// status, buffers its body, and puts head and body back together, so the success path
/// hands the framework its own response. Replays and problems are built in the
/// framework's type directly, from the stored bytes.
pub(crate) trait Framework {
    /// A response as the handler answers and the framework sends it.
    type Response;
    /// A response without its body, once the body is buffered.
    type Head;

    /// The response's status code.
    fn status(response: &Self::Response) -> StatusCode;

    /// Reads the response's body into memory, up to `limit` bytes.
    fn buffer(
        response: Self::Response,
        limit: usize,
    ) -> impl Future<Output = Result<(Self::Head, Bytes), Unbuffered>>;

    /// The head's status code.
    fn head_status(head: &Self::Head) -> StatusCode;

    /// Appends the head's values of the `allowed` headers to the store's header block,
    /// in `allowed`'s order and each header's own (with `store::push_header_line`).
    fn stored_headers(head: &Self::Head, allowed: &[HeaderName], out: &mut Vec<u8>);

    /// The response again, from its head and buffered body.
    fn assemble(head: Self::Head, body: Bytes) -> Self::Response;

    /// The head and body that send `problem`.
    fn problem_parts(problem: Problem) -> (Self::Head, Bytes);

    /// The response that sends `problem`.
    fn problem(problem: Problem) -> Self::Response {
        let (head, body) = Self::problem_parts(problem);
        Self::assemble(head, body)
    }

    /// A stored response replayed: its status, its header block (`store::header_lines`
    /// reads it) and body, marked `Idempotent-Replayed: true`.
    fn replay(status: StatusCode, headers: &[u8], body: Bytes) -> Self::Response;
}

/// Why a handler's response could not be read for storing.
#[derive(Debug)]
pub(crate) enum Unbuffered {
    /// It is larger than the limit.
    TooLarge,
    /// Its body stream failed, with this error.
    Failed(String),
}
