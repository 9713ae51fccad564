//! The request the harness sends, as its failure and crash hooks see and change it.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

/// A request as the harness sends it, handed to the failure and crash hooks to change.
///
/// ```
/// let hook = |request: idem_runtime::testing::TestRequest| {
///     request.header("x-test-fail", "503").query("trace=1")
/// };
/// # let _ = hook;
/// ```
#[derive(Debug, Clone)]
pub struct TestRequest {
    pub(super) method: Method,
    pub(super) uri: String,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl TestRequest {
    /// Sets the header `name` to `value`, replacing any value it had.
    ///
    /// # Panics
    /// If `name` or `value` is not a valid header name or value.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.header("x-test-fail", "503")
    /// # }
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.insert(header_name(name), header_value(value));
        self
    }

    /// Adds `name: value` beside the header's other values.
    ///
    /// # Panics
    /// If `name` or `value` is not a valid header name or value.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.append_header("x-trace", "a")
    /// # }
    /// ```
    pub fn append_header(mut self, name: &str, value: &str) -> Self {
        self.headers.append(header_name(name), header_value(value));
        self
    }

    /// Removes every value of the header `name`.
    ///
    /// # Panics
    /// If `name` is not a valid header name.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.remove_header("authorization")
    /// # }
    /// ```
    pub fn remove_header(mut self, name: &str) -> Self {
        self.headers.remove(header_name(name));
        self
    }

    /// Adds `pair` (`name=value`, already encoded) to the query string.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.query("fail=500")
    /// # }
    /// ```
    pub fn query(mut self, pair: &str) -> Self {
        let separator = if self.uri.contains('?') { '&' } else { '?' };
        self.uri = format!("{}{separator}{pair}", self.uri);
        self
    }

    /// Replaces the path (and query).
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.uri("/refunds")
    /// # }
    /// ```
    pub fn uri(mut self, uri: &str) -> Self {
        uri.clone_into(&mut self.uri);
        self
    }

    /// Replaces the body.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) -> idem_runtime::testing::TestRequest {
    /// request.body(r#"{"item":"pen"}"#)
    /// # }
    /// ```
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The body as it will be sent.
    ///
    /// ```
    /// # fn f(request: &idem_runtime::testing::TestRequest) -> usize {
    /// request.payload().len()
    /// # }
    /// ```
    pub fn payload(&self) -> &[u8] {
        &self.body
    }

    /// The headers as they are now.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) {
    /// let keyed = request.headers().contains_key("idempotency-key");
    /// # }
    /// ```
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The request in `http` 1.x types, as a [`Target`](super::Target) receives it.
    ///
    /// # Panics
    /// If the path set is not a valid request target.
    ///
    /// ```
    /// # fn f(request: idem_runtime::testing::TestRequest) {
    /// let request: http::Request<bytes::Bytes> = request.into_http();
    /// # }
    /// ```
    pub fn into_http(self) -> http::Request<Bytes> {
        let mut request = http::Request::new(self.body);
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri.parse().unwrap_or_else(|error| {
            panic!(
                "idem::testing: `{}` is no request target: {error}",
                self.uri
            )
        });
        *request.headers_mut() = self.headers;
        request
    }
}

pub(super) fn header_name(name: &str) -> HeaderName {
    HeaderName::from_bytes(name.as_bytes())
        .unwrap_or_else(|error| panic!("idem::testing: `{name}` is no header name: {error}"))
}

fn header_value(value: &str) -> HeaderValue {
    HeaderValue::from_str(value)
        .unwrap_or_else(|error| panic!("idem::testing: `{value}` is no header value: {error}"))
}
