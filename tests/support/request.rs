//! A request as the tests write it, free of any web framework: method, target, headers
//! and body. [`TestApp::call`](super::TestApp::call) turns it into the request of
//! whichever framework the test runs on, so one test body serves actix-web and axum.
//!
//! The builder's methods are named like actix-web's `TestRequest`, whose place it takes.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HeaderName, HeaderValue};
use http::{HeaderMap, Method};

/// One request: what a client puts on the wire, in `http` 1.x types.
#[derive(Debug, Clone)]
pub(crate) struct TestRequest {
    pub(crate) method: Method,
    pub(crate) uri: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Default for TestRequest {
    /// `GET /` with no headers and no body.
    fn default() -> Self {
        Self {
            method: Method::GET,
            uri: "/".to_owned(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }
}

/// A header as the tests write it: `("name", value)` with a name and a value `http`
/// converts from (`&str`, `String`, bytes, or its own types).
pub(crate) trait IntoHeaderPair {
    fn into_pair(self) -> (HeaderName, HeaderValue);
}

impl<K, V> IntoHeaderPair for (K, V)
where
    HeaderName: TryFrom<K>,
    <HeaderName as TryFrom<K>>::Error: std::fmt::Debug,
    HeaderValue: TryFrom<V>,
    <HeaderValue as TryFrom<V>>::Error: std::fmt::Debug,
{
    fn into_pair(self) -> (HeaderName, HeaderValue) {
        let name = HeaderName::try_from(self.0).expect("a valid header name");
        let value = HeaderValue::try_from(self.1).expect("bytes allowed in a header value");
        (name, value)
    }
}

impl TestRequest {
    pub(crate) fn get() -> Self {
        Self::default()
    }

    pub(crate) fn post() -> Self {
        Self::default().method(Method::POST)
    }

    pub(crate) fn put() -> Self {
        Self::default().method(Method::PUT)
    }

    pub(crate) fn method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    /// The request target: a path and an optional query.
    pub(crate) fn uri(mut self, uri: &str) -> Self {
        uri.parse::<http::Uri>()
            .unwrap_or_else(|error| panic!("{uri:?} is not a request target: {error}"));
        uri.clone_into(&mut self.uri);
        self
    }

    /// Sets a header, replacing any value it had.
    pub(crate) fn insert_header(mut self, header: impl IntoHeaderPair) -> Self {
        let (name, value) = header.into_pair();
        self.headers.insert(name, value);
        self
    }

    /// Adds a value to a header, keeping those it had (a header sent twice).
    pub(crate) fn append_header(mut self, header: impl IntoHeaderPair) -> Self {
        let (name, value) = header.into_pair();
        self.headers.append(name, value);
        self
    }

    /// The body, with the `Content-Length` a client sends for it.
    pub(crate) fn set_payload(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self.headers
            .insert(CONTENT_LENGTH, HeaderValue::from(self.body.len()));
        self
    }
}

/// A JSON order body in compact form.
pub(crate) fn order_json(item: &str, quantity: i64, amount_cents: i64) -> String {
    serde_json::json!({ "item": item, "quantity": quantity, "amount_cents": amount_cents })
        .to_string()
}

/// `POST uri` as `account` with a JSON `body` and no idempotency key.
pub(crate) fn post_unkeyed(uri: &str, account: i64, body: &str) -> TestRequest {
    TestRequest::post()
        .uri(uri)
        .insert_header(("x-account-id", account.to_string()))
        .insert_header(("content-type", "application/json"))
        .set_payload(body.to_owned())
}

/// `POST uri` as `account` with `Idempotency-Key: key` and a JSON `body`.
pub(crate) fn post(uri: &str, account: i64, key: &str, body: &str) -> TestRequest {
    post_raw_key(uri, account, key.as_bytes(), body)
}

/// Like [`post`], with the key header's raw bytes (for non-ASCII keys).
pub(crate) fn post_raw_key(uri: &str, account: i64, key: &[u8], body: &str) -> TestRequest {
    post_unkeyed(uri, account, body).insert_header(("idempotency-key", key))
}

/// `POST /orders` as `account` with `Idempotency-Key: key`.
pub(crate) fn post_order(account: i64, key: &str, body: &str) -> TestRequest {
    post("/orders", account, key, body)
}

/// `GET uri` as `account`.
pub(crate) fn get(uri: &str, account: i64) -> TestRequest {
    TestRequest::get()
        .uri(uri)
        .insert_header(("x-account-id", account.to_string()))
}
