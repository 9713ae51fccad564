//! A response taken apart, whichever framework answered it, and the assertions the tests
//! make on it.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::{APP_PROBLEM, IDEM_PROBLEM};

/// A response taken apart: status, headers and the exact body bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    /// The one value of header `name`, as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.get_all(name).iter();
        let value = values.next()?;
        assert!(
            values.next().is_none(),
            "header {name} appears more than once"
        );
        Some(value.to_str().expect("header value is text"))
    }

    /// Whether idem marked this response as a replay (`Idempotent-Replayed: true`).
    /// Any other value of the header fails the test.
    pub(crate) fn replayed(&self) -> bool {
        match self.header("idempotent-replayed") {
            None => false,
            Some("true") => true,
            Some(other) => panic!("Idempotent-Replayed: {other:?}"),
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "body is not JSON ({error}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts a problem+json response with this status and `type`; returns its body.
    pub(crate) fn assert_problem(&self, status: u16, type_uri: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "status; body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let body = self.json();
        assert_eq!(body["type"], type_uri, "problem type; body: {body}");
        assert_eq!(
            body["status"], status,
            "problem status member; body: {body}"
        );
        assert!(
            body["title"].as_str().is_some_and(|t| !t.is_empty()),
            "problem title; body: {body}"
        );
        body
    }

    /// Asserts one of idem's problems, e.g. `assert_idem_problem(409, "request-in-progress")`.
    pub(crate) fn assert_idem_problem(&self, status: u16, slug: &str) -> Value {
        self.assert_problem(status, &format!("{IDEM_PROBLEM}{slug}"))
    }

    /// Asserts one of the example's problems, e.g. `assert_app_problem(402, "card-declined")`.
    pub(crate) fn assert_app_problem(&self, status: u16, slug: &str) -> Value {
        self.assert_problem(status, &format!("{APP_PROBLEM}{slug}"))
    }

    /// Asserts a 201 from `POST /orders` that ran the handler (not a replay); returns the
    /// order's id.
    pub(crate) fn assert_created(&self) -> i64 {
        assert_eq!(
            self.status,
            201,
            "status; body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert!(
            !self.replayed(),
            "an original response is not marked as replayed"
        );
        let id = self.json()["id"]
            .as_i64()
            .expect("the order has an integer id");
        assert_eq!(
            self.header("location"),
            Some(format!("/orders/{id}").as_str())
        );
        assert_eq!(self.header("content-type"), Some("application/json"));
        id
    }

    /// Asserts that this is a replay of `original`: the same status, the same body bytes,
    /// the same replayable headers, plus `Idempotent-Replayed: true`.
    pub(crate) fn assert_replay_of(&self, original: &Reply) {
        assert!(!original.replayed(), "the original is not itself a replay");
        assert!(
            self.replayed(),
            "a replay carries Idempotent-Replayed: true; got {} with body {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.status, original.status, "replayed status");
        assert_eq!(self.body, original.body, "replayed body bytes");
        for name in [
            "location",
            "content-type",
            "content-location",
            "etag",
            "last-modified",
        ] {
            assert_eq!(
                self.header(name),
                original.header(name),
                "replayed {name} header"
            );
        }
    }
}
