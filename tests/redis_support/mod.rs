//! The Redis tests' server and helpers.

pub(crate) mod model;

use std::future::Future;
use std::time::Duration;

use idem::redis::{RedisRequest, RedisStore};
use idem_testkit::RedisServer;
use redis::aio::ConnectionManager;

/// The scope every test key is under.
pub(crate) const SCOPE: &str = "acct";

/// A private `redis-server`, the store on it, and a plain connection for what the store
/// does not do (writing foreign values, reading TTLs, ending a lease early).
pub(crate) struct Server {
    pub(crate) store: RedisStore,
    pub(crate) raw: ConnectionManager,
    _server: RedisServer,
}

impl Server {
    pub(crate) async fn start() -> Self {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url()).await.expect("connect");
        let client = redis::Client::open(server.url()).unwrap();
        let raw = ConnectionManager::new(client).await.expect("connect");
        Self {
            store,
            raw,
            _server: server,
        }
    }

    /// The Redis name of `key`'s record under [`SCOPE`] (the layout the store documents).
    pub(crate) fn record(&self, key: &str) -> String {
        format!("idem:{{{SCOPE}:{key}}}")
    }

    pub(crate) async fn pttl(&self, name: &str) -> i64 {
        let mut raw = self.raw.clone();
        redis::cmd("PTTL")
            .arg(name)
            .query_async(&mut raw)
            .await
            .unwrap()
    }

    /// Lets Redis expire `name` now (a TTL of a millisecond), and waits until it has.
    pub(crate) async fn expire_now(&self, name: &str) {
        let mut raw = self.raw.clone();
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(name)
            .arg(1)
            .query_async(&mut raw)
            .await
            .unwrap();
        until(|| async { (self.pttl(name).await == -2).then_some(()) }).await;
    }
}

/// A request for `key` under [`SCOPE`] whose fingerprint is `body` repeated.
pub(crate) fn request(
    key: &str,
    body: u8,
    lease: Duration,
    retention: Duration,
) -> RedisRequest<'_> {
    RedisRequest {
        scope: SCOPE,
        key,
        fingerprint: [body; 32],
        method: "POST",
        path: "/notifications",
        lease,
        retention,
    }
}

/// Polls `check` until it gives a value. Redis expires keys on access, so a key past
/// its TTL is gone at the next read; the poll only waits for the TTL to pass.
pub(crate) async fn until<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..2_000 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition did not hold after 2000 polls");
}
