//! Shared by the axum tests that serve a whole router over real HTTP: a server on a free
//! port of 127.0.0.1, requests to it with reqwest, and what a reply says.
#![allow(dead_code)] // Each test file uses the part of this module it needs.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde_json::Value;

/// The caller, from `X-Account-Id`; 401 without it, before idem reads the key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Account(pub(crate) i64);

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Owned(self.0.to_string())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Account {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get("x-account-id")
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .map(Account)
            .ok_or((StatusCode::UNAUTHORIZED, "send X-Account-Id"))
    }
}

/// How many times a handler body ran (a router's state).
#[derive(Clone, Default)]
pub(crate) struct Counter(pub(crate) Arc<AtomicUsize>);

/// The tests' order body.
#[derive(serde::Deserialize)]
pub(crate) struct NewOrder {
    pub(crate) item: String,
    pub(crate) quantity: i32,
}

/// A server on a free port of 127.0.0.1, stopped when dropped.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Serves `app` (with its `Idem` and anything else in its layers).
    pub(crate) async fn start(app: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Self {
            base,
            client: reqwest::Client::new(),
            task,
        }
    }

    /// A POST to `path` on this server, to complete and [`send`](Self::send).
    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.base))
    }

    /// Sends `request` and reads the whole reply.
    pub(crate) async fn send(request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("the server answers");
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("read the body").to_vec(),
        }
    }
}

/// A reply as the client got it.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    pub(crate) fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// An idem problem response with this status and slug; its JSON.
    pub(crate) fn assert_problem(&self, status: u16, slug: &str) -> Value {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let problem = self.json();
        let kind = problem["type"].as_str().unwrap_or_default();
        assert!(kind.ends_with(&format!("#{slug}")), "{problem}");
        problem
    }

    /// A replay of `original`: its status and exact body, marked replayed.
    pub(crate) fn assert_replay_of(&self, original: &Reply) {
        assert!(self.replayed(), "a replay: {self:?}");
        assert_eq!(self.status, original.status);
        assert_eq!(self.body, original.body, "the exact bytes");
    }
}

/// Instantiates each generic test `name::<DB>()` once per database on a multi-threaded
/// runtime (the server and the client share it), as `postgres::name` and `sqlite::name`.
macro_rules! axum_backend_tests {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<sqlx::Postgres>().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<sqlx::Sqlite>().await;
                }
            )+
        }
    };
}
pub(crate) use axum_backend_tests;
