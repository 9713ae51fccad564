//! The `hand` baseline: the seed's single-transaction protocol (section 4 of
//! `../shared/seed/000_b1d617593e8eba33.txt`) written by hand in a handler, the way a
//! careful user would write it without idem.
//!
//! Careful means: the claim and the business write in one transaction, a lock timeout
//! so a duplicate fails fast with 409 instead of queueing, a fingerprint of the
//! canonicalized request so a changed payload is a 422, replay of status, `Location` and
//! exact body bytes, and `BEGIN` with its `SET LOCAL` in one round trip. It stores the
//! response as `bytea` rather than the seed's `jsonb`: replay must return the exact bytes,
//! and parsing JSON in the database would only make the baseline slower.
//!
//! On SQLite the same protocol, as a careful user writes it there: `BEGIN IMMEDIATE`,
//! which takes the database's one write lock up front (a deferred `BEGIN` that reads
//! first could fail with `SQLITE_BUSY` when it upgrades), waiting for it as long as the
//! connection's busy timeout says; there is no row lock to wait on, since the writer holds
//! the whole database.

use std::borrow::Cow;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::{Pool, Postgres, Sqlite};

use crate::orders::{Account, NewOrder, OrderStore};

/// The seed's key table (section 3), with the response stored as exact bytes plus the
/// `Location` it must replay (the seed's gotchas). Like `idem_keys` it has its primary
/// key and one index for expiry, so both tables cost the same to write.
pub(crate) const SCHEMA: &str = "\
CREATE TABLE hand_keys (
    account_id        bigint      NOT NULL,
    idem_key          text        NOT NULL,
    request_hash      bytea       NOT NULL,
    method            text        NOT NULL,
    path              text        NOT NULL,
    state             text        NOT NULL DEFAULT 'started',
    recovery_point    text        NOT NULL DEFAULT 'started',
    locked_until      timestamptz,
    response_code     int,
    response_location text,
    response_body     bytea,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, idem_key)
);
CREATE INDEX hand_keys_created_at ON hand_keys (created_at);";

/// One round trip: the transaction and its lock timeout.
pub(crate) const BEGIN: &str = "BEGIN; SET LOCAL lock_timeout = '1s'";

/// The seed's claim.
pub(crate) const CLAIM: &str = "\
INSERT INTO hand_keys (account_id, idem_key, request_hash, method, path, locked_until)
VALUES ($1, $2, $3, $4, $5, now() + interval '60 seconds')
ON CONFLICT (account_id, idem_key) DO NOTHING
RETURNING true";

/// The seed's record of the response.
pub(crate) const COMPLETE: &str = "\
UPDATE hand_keys SET state = 'completed', response_code = 201, response_location = $3,
       response_body = $4, locked_until = NULL
 WHERE account_id = $1 AND idem_key = $2";

/// A key that exists, with its row lock (PostgreSQL).
const SELECT_EXISTING: &str = "\
SELECT request_hash, state, coalesce(locked_until > now(), false),
       response_code, response_location, response_body
  FROM hand_keys WHERE account_id = $1 AND idem_key = $2 FOR UPDATE";

/// SQLSTATE `lock_not_available`: a duplicate waited longer than the lock timeout.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The same table on SQLite: times in seconds since the Unix epoch.
pub(crate) const SQLITE_SCHEMA: &str = "\
CREATE TABLE hand_keys (
    account_id        INTEGER NOT NULL,
    idem_key          TEXT    NOT NULL,
    request_hash      BLOB    NOT NULL,
    method            TEXT    NOT NULL,
    path              TEXT    NOT NULL,
    state             TEXT    NOT NULL DEFAULT 'started',
    recovery_point    TEXT    NOT NULL DEFAULT 'started',
    locked_until      INTEGER,
    response_code     INTEGER,
    response_location TEXT,
    response_body     BLOB,
    created_at        INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (account_id, idem_key)
) STRICT;
CREATE INDEX hand_keys_created_at ON hand_keys (created_at);";

/// The write lock, taken at once; the busy timeout is the connection's.
pub(crate) const SQLITE_BEGIN: &str = "BEGIN IMMEDIATE";

/// The seed's claim on SQLite.
pub(crate) const SQLITE_CLAIM: &str = "\
INSERT INTO hand_keys (account_id, idem_key, request_hash, method, path, locked_until)
VALUES ($1, $2, $3, $4, $5, unixepoch() + 60)
ON CONFLICT (account_id, idem_key) DO NOTHING
RETURNING true";

/// A key that exists; the write lock already keeps every other writer out.
const SQLITE_SELECT_EXISTING: &str = "\
SELECT request_hash, state, coalesce(locked_until > unixepoch(), false),
       response_code, response_location, response_body
  FROM hand_keys WHERE account_id = $1 AND idem_key = $2";

/// `SQLITE_BUSY` in the low byte of every extended code: no write lock within the busy
/// timeout.
const SQLITE_BUSY: i32 = 5;

type ExistingRow = (
    Vec<u8>,
    String,
    bool,
    Option<i32>,
    Option<String>,
    Option<Vec<u8>>,
);

/// A database the hand-written baseline runs on: its statements there.
pub(crate) trait Hand: OrderStore {
    /// What opens the transaction (and, on PostgreSQL, sets its lock timeout).
    const BEGIN: &'static str;
    const CLAIM: &'static str;
    const SELECT_EXISTING: &'static str;

    /// Claims the key, runs the insert and records the response in one transaction;
    /// or answers from the row that holds the key.
    fn execute(
        pool: &Pool<Self>,
        request: &HandRequest<'_>,
        order: &NewOrder,
    ) -> impl Future<Output = sqlx::Result<Answer>>;

    /// A duplicate (PostgreSQL) or another writer (SQLite) held the lock too long.
    fn is_lock_timeout(error: &sqlx::Error) -> bool;
}

/// What identifies one request to the key table.
#[derive(Debug)]
pub(crate) struct HandRequest<'a> {
    account: Account,
    key: &'a str,
    hash: &'a [u8],
    method: &'a str,
    path: &'a str,
}

/// What the baseline answers, in neither framework's types: actix-web and axum render
/// it to the same status, headers and bytes.
#[derive(Debug)]
pub(crate) struct Answer {
    status: u16,
    headers: AnswerHeaders,
    body: Vec<u8>,
}

/// An answer's headers: lower-case names and their values.
pub(crate) type AnswerHeaders = Vec<(&'static str, Cow<'static, str>)>;

impl Answer {
    pub(crate) fn into_parts(self) -> (u16, AnswerHeaders, Vec<u8>) {
        (self.status, self.headers, self.body)
    }
}

/// `POST /hand/orders` on actix-web.
pub(crate) async fn create_order<DB: Hand>(
    req: HttpRequest,
    account: Account,
    pool: web::Data<Pool<DB>>,
    body: web::Bytes,
) -> HttpResponse {
    let key = idempotency_key(
        req.headers()
            .get_all("idempotency-key")
            .map(|value| value.as_bytes()),
    );
    let path = req
        .uri()
        .path_and_query()
        .map_or(req.path(), |pq| pq.as_str());
    render(answer(&pool, account, key, req.method().as_str(), path, &body).await)
}

/// The baseline's answer as actix-web's response.
fn render(answer: Answer) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(answer.status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    for (name, value) in answer.headers {
        response.insert_header((name, value.as_ref()));
    }
    response.body(answer.body)
}

/// The whole protocol for one request, whichever framework received it. `key` is the
/// `Idempotency-Key` if it is valid ([`idempotency_key`]).
pub(crate) async fn answer<DB: Hand>(
    pool: &Pool<DB>,
    account: Account,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Answer {
    let Some(key) = key else {
        return problem(
            400,
            "send an Idempotency-Key of 1 to 255 visible characters",
        );
    };
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return problem(400, "the body is not JSON");
    };
    let order = match NewOrder::deserialize(&value) {
        Ok(order) => order,
        Err(error) => return problem(422, &error.to_string()),
    };
    // The seed: sha256(canonicalJson({ method, path, body })). serde_json's map is
    // ordered by key, so serializing the parsed value is its canonical form.
    let canonical = serde_json::json!({ "method": method, "path": path, "body": value });
    let hash = Sha256::digest(serde_json::to_vec(&canonical).expect("JSON serializes"));

    let request = HandRequest {
        account,
        key,
        hash: hash.as_slice(),
        method,
        path,
    };
    match DB::execute(pool, &request, &order).await {
        Ok(answer) => answer,
        Err(error) if <DB as Hand>::is_lock_timeout(&error) => in_progress(),
        // The transaction was dropped, hence rolled back: the key can be retried.
        Err(_) => problem(500, "nothing was saved; retry"),
    }
}

/// Implements [`Hand`] for one database: the same steps, the statements given.
macro_rules! hand {
    ($db:ty, $begin:expr, $claim:expr, $select:expr, $is_lock_timeout:expr) => {
        impl Hand for $db {
            const BEGIN: &'static str = $begin;
            const CLAIM: &'static str = $claim;
            const SELECT_EXISTING: &'static str = $select;

            async fn execute(
                pool: &Pool<Self>,
                request: &HandRequest<'_>,
                order: &NewOrder,
            ) -> sqlx::Result<Answer> {
                let HandRequest {
                    account,
                    key,
                    hash,
                    method,
                    path,
                } = *request;
                // PostgreSQL: the lock timeout makes a concurrent duplicate, blocked on the
                // key's index entry, give up after a second instead of holding its
                // connection for as long as the first request runs. SQLite: the write lock.
                let mut tx = pool.begin_with(Self::BEGIN).await?;
                let claimed: Option<bool> = sqlx::query_scalar(Self::CLAIM)
                    .bind(account.0)
                    .bind(key)
                    .bind(hash)
                    .bind(method)
                    .bind(path)
                    .fetch_optional(&mut *tx)
                    .await?;

                if claimed.is_none() {
                    let row: Option<ExistingRow> = sqlx::query_as(Self::SELECT_EXISTING)
                        .bind(account.0)
                        .bind(key)
                        .fetch_optional(&mut *tx)
                        .await?;
                    // Nothing was written: end the transaction now to free the connection.
                    tx.rollback().await?;
                    return Ok(answer_existing(row, hash));
                }

                let created = Self::insert_order(&mut tx, account, order).await?;
                let body = serde_json::to_vec(&created).expect("an order serializes");
                let location = format!("/orders/{}", created.id);
                sqlx::query(COMPLETE)
                    .bind(account.0)
                    .bind(key)
                    .bind(&location)
                    .bind(&body)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Answer {
                    status: 201,
                    headers: vec![("location", location.into()), ("content-type", JSON.into())],
                    body,
                })
            }

            fn is_lock_timeout(error: &sqlx::Error) -> bool {
                error
                    .as_database_error()
                    .and_then(|e| e.code())
                    .is_some_and(|code| $is_lock_timeout(&code))
            }
        }
    };
}

hand!(Postgres, BEGIN, CLAIM, SELECT_EXISTING, |code: &str| code
    == LOCK_NOT_AVAILABLE);
hand!(
    Sqlite,
    SQLITE_BEGIN,
    SQLITE_CLAIM,
    SQLITE_SELECT_EXISTING,
    |code: &str| code
        .parse::<i32>()
        .is_ok_and(|code| code & 0xff == SQLITE_BUSY)
);

/// The answer for a key that a row holds already.
fn answer_existing(row: Option<ExistingRow>, hash: &[u8]) -> Answer {
    let Some((stored_hash, state, _locked, code, location, body)) = row else {
        // The holder rolled back between our insert and our select.
        return in_progress();
    };
    if stored_hash != hash {
        return problem(422, "this Idempotency-Key was used for another request");
    }
    match (state.as_str(), code, body) {
        ("completed", Some(code), Some(body)) => replay(code, location, body),
        // In the single-transaction form a started row is never committed, so this is
        // only reached by a multi-phase writer; lease takeover is not the baseline's job.
        _ => in_progress(),
    }
}

/// 1 to 255 visible ASCII characters, sent once: the request's `Idempotency-Key`
/// values, in either framework's header type.
pub(crate) fn idempotency_key<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Option<&'a str> {
    let key = std::str::from_utf8(values.next()?).ok()?;
    let valid = values.next().is_none()
        && (1..=255).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_graphic());
    valid.then_some(key)
}

/// The content type of every answer that carries an order.
const JSON: &str = "application/json";

fn replay(code: i32, location: Option<String>, body: Vec<u8>) -> Answer {
    let status = u16::try_from(code)
        .ok()
        .filter(|code| (100..=999).contains(code))
        .unwrap_or(500);
    let mut headers = Vec::with_capacity(3);
    if let Some(location) = location {
        headers.push(("location", location.into()));
    }
    headers.push(("idempotent-replayed", "true".into()));
    headers.push(("content-type", JSON.into()));
    Answer {
        status,
        headers,
        body,
    }
}

fn in_progress() -> Answer {
    let mut answer = problem(409, "a request with this key is in progress");
    answer.headers.push(("retry-after", "1".into()));
    answer
}

fn problem(status: u16, detail: &str) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/problem+json".into())],
        body: serde_json::json!({ "status": status, "detail": detail })
            .to_string()
            .into_bytes(),
    }
}
