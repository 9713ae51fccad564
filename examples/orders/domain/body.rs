//! The JSON bodies the service reads itself rather than through the framework's `Json`:
//! a payment and a notification, whose every failure is a problem of their own endpoint.
//! Each binary's extractor is one call to its `json_body`, so the order of the checks
//! (media type, then the bytes, then the fields) is written once.

use serde::de::DeserializeOwned;

/// A body sent as `application/json` and parsed by the domain.
pub(crate) trait JsonBody: Sized {
    /// The endpoint's error, which each failure below becomes.
    type Error;

    /// A body of another media type: a 415 before it is read.
    fn unsupported_media_type() -> Self::Error;

    /// A body that could not be read or is not JSON (`detail` says why): a 400.
    fn malformed(detail: String) -> Self::Error;

    /// JSON of the wrong shape, or fields out of range (`detail` says which): a 422.
    fn invalid(detail: String) -> Self::Error;

    /// The value in a body that was read whole; [`fields`] decodes it.
    fn parse(body: &[u8]) -> Result<Self, Self::Error>;
}

/// The body's JSON as `F`: what is not JSON is malformed, JSON that does not fit `F`
/// is invalid.
pub(crate) fn fields<T: JsonBody, F: DeserializeOwned>(body: &[u8]) -> Result<F, T::Error> {
    serde_json::from_slice(body).map_err(|error| {
        if error.is_data() {
            T::invalid(error.to_string())
        } else {
            T::malformed(error.to_string())
        }
    })
}

/// Whether the request's `Content-Type` is `application/json` (parameters aside).
pub(crate) fn is_json(content_type: Option<&[u8]>) -> bool {
    content_type
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}
