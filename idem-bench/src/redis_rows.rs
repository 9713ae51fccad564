//! The Redis rows (issue 40): an endpoint whose effect lives only at an outside provider
//! (`POST /redis/*/notifications`: send a message), without idempotency (`bare`), with
//! the seed's Redis protocol written by hand (`hand`: `SET key value NX PX lease`, the
//! effect, then `SET key answer PX retention`), and with idem's Redis store under
//! `#[idempotent(store = redis)]` (`idem`, `replay`: one step calling the same provider).
//!
//! Served by `idem-bench serve --redis URL`, beside the database rows, on the same
//! actix-web server; the parent starts a private `redis-server` (no persistence, as the
//! private PostgreSQL has no fsync) and passes its URL.

use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::{HttpRequest, HttpResponse, web};
use idem::Settings;
use idem::redis::{RedisIdem, RedisStore, Steps};
use redis::aio::ConnectionManager;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::hand::idempotency_key;
use crate::orders::{Account, NewOrder};

/// `bare`'s path: the provider call alone.
pub(crate) const BARE_PATH: &str = "/redis/bare/notifications";
/// `hand`'s path: the seed's Redis protocol written by hand.
pub(crate) const HAND_PATH: &str = "/redis/hand/notifications";
/// `idem`'s path: idem's Redis store under `#[idempotent(store = redis)]`.
pub(crate) const IDEM_PATH: &str = "/redis/idem/notifications";

/// How long the hand-written claim holds a key, and how long its answer is kept: the
/// values the database rows use.
const LEASE_MS: u64 = 30_000;
const RETENTION_MS: u64 = 24 * 3600 * 1000;

/// The Redis connection and the provider's message counter, shared by every worker, and
/// idem's configuration for the `idem` row, on the same Redis.
pub(crate) struct RedisRows {
    conn: ConnectionManager,
    sent: AtomicU64,
    idem: RedisIdem,
}

impl RedisRows {
    /// `settings`: the database rows' `Idem`'s, so both stores answer alike.
    pub(crate) async fn connect(url: &str, settings: Settings) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
        let conn = ConnectionManager::new(client)
            .await
            .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
        let store = RedisStore::connect(url)
            .await
            .map_err(|e| format!("idem cannot connect to Redis at {url}: {e}"))?;
        Ok(Self {
            conn,
            sent: AtomicU64::new(0),
            idem: RedisIdem::new(store).with_settings(settings),
        })
    }

    /// The outside provider: takes the message and its idempotency key, answers with the
    /// message's id at once (what the rows measure is the protocol around it).
    fn send(&self, key: &str) -> u64 {
        std::hint::black_box(key);
        self.sent.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Adds the Redis rows' routes.
pub(crate) fn routes(cfg: &mut web::ServiceConfig, rows: web::Data<RedisRows>) {
    cfg.app_data(rows.idem.clone())
        .app_data(rows)
        .route(BARE_PATH, web::post().to(bare))
        .route(HAND_PATH, web::post().to(hand))
        .route(IDEM_PATH, web::post().to(with_idem));
}

/// The answer: 201 and the message's id.
fn sent(id: u64) -> Vec<u8> {
    format!("{{\"id\":{id},\"status\":\"sent\"}}").into_bytes()
}

/// `POST /redis/bare/notifications`: send, no idempotency.
async fn bare(
    account: Account,
    rows: web::Data<RedisRows>,
    message: web::Json<NewOrder>,
) -> HttpResponse {
    std::hint::black_box(&message);
    let id = rows.send(&account.0.to_string());
    HttpResponse::Created()
        .content_type("application/json")
        .body(sent(id))
}

/// `POST /redis/hand/notifications`: the seed's protocol on Redis, by hand. The key's
/// value is `p <fingerprint>` while in progress and `c <fingerprint> <status> <body>`
/// once completed; a duplicate within the lease gets 409, one with another body 422, a
/// completed key its answer again.
async fn hand(
    req: HttpRequest,
    account: Account,
    rows: web::Data<RedisRows>,
    body: web::Bytes,
) -> HttpResponse {
    let Some(key) = idempotency_key(
        req.headers()
            .get_all("idempotency-key")
            .map(|value| value.as_bytes()),
    ) else {
        return problem(
            400,
            "send an Idempotency-Key of 1 to 255 visible characters",
        );
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return problem(400, "the body is not JSON");
    };
    if let Err(error) = NewOrder::deserialize(&value) {
        return problem(422, &error.to_string());
    }
    // The seed: sha256(canonicalJson({ method, path, body })), as hand.rs does.
    let canonical = serde_json::json!({ "method": "POST", "path": req.path(), "body": value });
    let fingerprint: String = Sha256::digest(serde_json::to_vec(&canonical).expect("JSON"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = format!("hand:{{{}:{key}}}", account.0);
    let mut conn = rows.conn.clone();
    let claimed: Option<String> = match redis::cmd("SET")
        .arg(&name)
        .arg(format!("p {fingerprint}"))
        .arg("NX")
        .arg("PX")
        .arg(LEASE_MS)
        .query_async(&mut conn)
        .await
    {
        Ok(reply) => reply,
        Err(_) => return unavailable(),
    };
    if claimed.is_none() {
        let existing: Option<Vec<u8>> =
            match redis::cmd("GET").arg(&name).query_async(&mut conn).await {
                Ok(value) => value,
                Err(_) => return unavailable(),
            };
        return answer_existing(existing.as_deref(), &fingerprint);
    }
    let id = rows.send(&format!("{name}:send"));
    let answer = sent(id);
    let mut stored = format!("c {fingerprint} 201 ").into_bytes();
    stored.extend_from_slice(&answer);
    let done: Result<(), _> = redis::cmd("SET")
        .arg(&name)
        .arg(stored)
        .arg("PX")
        .arg(RETENTION_MS)
        .query_async(&mut conn)
        .await;
    if done.is_err() {
        // The message went out; the key stays claimed until its lease ends.
        return unavailable();
    }
    HttpResponse::Created()
        .content_type("application/json")
        .body(answer)
}

/// `POST /redis/idem/notifications`: `hand`'s work under idem's Redis store: one step
/// that calls the same provider with a derived key, its output recorded; the lease and
/// retention are `hand`'s.
#[idem::idempotent(scope = account, store = redis, retention = "24h", lease = "30s")]
async fn with_idem(
    account: Account,
    steps: Steps,
    rows: web::Data<RedisRows>,
    message: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    std::hint::black_box((&account, &message));
    let key = steps.derived_key("send");
    let id: u64 = steps
        .run("sent", async || Ok::<_, actix_web::Error>(rows.send(&key)))
        .await?;
    Ok(HttpResponse::Created()
        .content_type("application/json")
        .body(sent(id)))
}

fn answer_existing(existing: Option<&[u8]>, fingerprint: &str) -> HttpResponse {
    let Some(existing) = existing else {
        // Released or expired between the two commands.
        return in_progress();
    };
    let mut parts = existing.splitn(4, |&b| b == b' ');
    let state = parts.next().unwrap_or_default();
    if parts.next() != Some(fingerprint.as_bytes()) {
        return problem(422, "this Idempotency-Key was used for another request");
    }
    match (state, parts.next(), parts.next()) {
        (b"c", Some(status), Some(body)) => {
            let status = std::str::from_utf8(status)
                .ok()
                .and_then(|s| s.parse::<u16>().ok())
                .and_then(|s| actix_web::http::StatusCode::from_u16(s).ok())
                .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
            HttpResponse::build(status)
                .insert_header(("idempotent-replayed", "true"))
                .content_type("application/json")
                .body(body.to_vec())
        }
        _ => in_progress(),
    }
}

fn in_progress() -> HttpResponse {
    let mut response = problem(409, "a request with this key is in progress");
    response.headers_mut().insert(
        actix_web::http::header::RETRY_AFTER,
        actix_web::http::header::HeaderValue::from_static("1"),
    );
    response
}

fn unavailable() -> HttpResponse {
    let mut response = problem(503, "Redis is unavailable; retry");
    response.headers_mut().insert(
        actix_web::http::header::RETRY_AFTER,
        actix_web::http::header::HeaderValue::from_static("1"),
    );
    response
}

fn problem(status: u16, detail: &str) -> HttpResponse {
    let code = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(code)
        .content_type("application/problem+json")
        .body(serde_json::json!({ "status": status, "detail": detail }).to_string())
}
