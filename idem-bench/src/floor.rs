//! The floor: the statements alone, sent from this process with no HTTP in between, at
//! the same concurrency as the HTTP scenarios. `floor-protocol / floor-bare` is what
//! idempotency costs the database itself on this machine; HTTP, the framework and the
//! macro can only add to it.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::task::JoinSet;

use crate::db::protocol;
use std::sync::Arc;

use crate::load::{KeyLog, new_key};
use crate::orders::{Account, NewOrder, ORDER_BODY, OrderStore};
use crate::stats::Stats;

/// Which statements one operation sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Floor {
    /// The insert, autocommit: one round trip.
    Bare,
    /// idem's first execution: BEGIN, the claim (which sets the lock timeouts), the insert,
    /// the completion, COMMIT: five round trips.
    Protocol,
    /// The hand-written baseline's first execution, also five round trips.
    Hand,
    /// idem's statements for a key that completed: BEGIN, the claim (which returns the
    /// stored row), ROLLBACK.
    Replay,
}

/// The round trips of one operation, for the breakdown of where its time goes.
pub(crate) const STEPS: [&str; 5] = [
    "BEGIN",
    "claim",
    "insert",
    "complete",
    "COMMIT (ROLLBACK for a replay)",
];

/// How long each of [`STEPS`] took (the bare insert only has `insert`).
pub(crate) type Steps = [Option<Duration>; 5];

/// Times one step.
async fn step<T>(steps: &mut Steps, i: usize, work: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = work.await;
    steps[i] = Some(started.elapsed());
    out
}

/// The body of a first execution, as the handler would answer it.
pub(crate) fn order() -> NewOrder {
    serde_json::from_slice(ORDER_BODY).expect("the request body is a valid order")
}

/// Runs `floor` on `workers` connections of `pool` for `duration`.
///
/// Each worker keeps its connection for the whole run: a pool checks a connection with a
/// round trip when it hands it out and again when it gets it back (sqlx's
/// `test_before_acquire` and its ping on release), and the floor is the statements alone.
///
/// `Protocol` logs its keys in `keys`; `Replay` sends them again.
pub(crate) async fn run(
    pool: &PgPool,
    floor: Floor,
    workers: usize,
    duration: Duration,
    keys: &Arc<KeyLog>,
) -> Result<Stats, String> {
    let mut conns = Vec::with_capacity(workers);
    for _ in 0..workers {
        conns.push(
            pool.acquire()
                .await
                .map_err(|e| format!("the floor cannot get a connection: {e}"))?,
        );
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = JoinSet::new();
    for mut conn in conns {
        let keys = Arc::clone(keys);
        tasks.spawn(async move {
            let order = order();
            let mut stats = Stats::default();
            while Instant::now() < deadline {
                let (account, key) = match floor {
                    Floor::Replay => match keys.next() {
                        Some(entry) => entry,
                        None => {
                            stats.error(|| "no completed keys to replay".to_owned());
                            break;
                        }
                    },
                    _ => new_key(),
                };
                let account_id = account;
                let account = Account(i64::from(account));
                let started = Instant::now();
                let result = once(&mut conn, floor, account, &key, &order, &mut [None; 5]).await;
                if result.is_ok() && floor == Floor::Protocol {
                    keys.push(account_id, key);
                }
                stats.record(started.elapsed());
                match result {
                    Ok(()) => {
                        stats.ok += 1;
                        stats.executed += 1;
                    }
                    Err(error) => stats.error(|| error.to_string()),
                }
            }
            stats
        });
    }
    let mut stats = Stats::default();
    while let Some(part) = tasks.join_next().await {
        stats.absorb(&part.map_err(|e| format!("a floor task failed: {e}"))?);
    }
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// One operation of `floor` with a new key, timing each round trip into `steps`.
pub(crate) async fn once(
    conn: &mut PgConnection,
    floor: Floor,
    account: Account,
    key: &str,
    order: &NewOrder,
    steps: &mut Steps,
) -> sqlx::Result<()> {
    match floor {
        Floor::Bare => step(steps, 2, Postgres::insert_order(conn, account, order))
            .await
            .map(drop),
        Floor::Protocol => protocol_once(conn, account, key, Some(order), steps)
            .await
            .and_then(|(_, claimed)| {
                claimed
                    .then_some(())
                    .ok_or_else(|| sqlx::Error::Protocol("the new key existed".into()))
            }),
        Floor::Hand => hand_once(conn, account, key, order, steps).await,
        Floor::Replay => protocol_once(conn, account, key, Some(order), steps)
            .await
            .and_then(|(_, claimed)| {
                (!claimed)
                    .then_some(())
                    .ok_or_else(|| sqlx::Error::Protocol("the completed key was missing".into()))
            }),
    }
}

/// The hand-written baseline's statements (`crate::hand`) for a new key.
async fn hand_once(
    conn: &mut PgConnection,
    account: Account,
    key: &str,
    order: &NewOrder,
    steps: &mut Steps,
) -> sqlx::Result<()> {
    let mut tx = step(steps, 0, conn.begin_with(crate::hand::BEGIN)).await?;
    let claimed: Option<bool> = step(
        steps,
        1,
        sqlx::query_scalar(crate::hand::CLAIM)
            .bind(account.0)
            .bind(key)
            .bind([7u8; 32].as_slice())
            .bind("POST")
            .bind("/hand/orders")
            .fetch_optional(&mut *tx),
    )
    .await?;
    if claimed.is_none() {
        return Err(sqlx::Error::Protocol("the new key existed".into()));
    }
    let created = step(steps, 2, Postgres::insert_order(&mut tx, account, order)).await?;
    let body = serde_json::to_vec(&created).expect("an order serializes");
    let location = format!("/orders/{}", created.id);
    step(
        steps,
        3,
        sqlx::query(crate::hand::COMPLETE)
            .bind(account.0)
            .bind(key)
            .bind(&location)
            .bind(&body)
            .execute(&mut *tx),
    )
    .await?;
    step(steps, 4, tx.commit()).await
}

/// idem's statements for one request with `key`: on a new key the claim, the insert
/// (when `order` is given), the completion and COMMIT; on a key that exists, the claim
/// and ROLLBACK, as a replay does. Returns the claim statement's own latency and
/// whether it claimed.
pub(crate) async fn protocol_once(
    conn: &mut PgConnection,
    account: Account,
    key: &str,
    order: Option<&NewOrder>,
    steps: &mut Steps,
) -> sqlx::Result<(Duration, bool)> {
    let scope = account.0.to_string();
    let mut tx = step(steps, 0, conn.begin()).await?;
    let row: Option<protocol::KeyRow> = step(
        steps,
        1,
        sqlx::query_as(protocol::CLAIM)
            .bind(&scope)
            .bind(key)
            // The fingerprint is computed in the server; its bytes cost the database
            // the same.
            .bind([7u8; 32].as_slice())
            .bind("POST")
            .bind("/idem/orders")
            .bind(Duration::from_secs(24 * 3600))
            .bind(protocol::CLAIM_WAIT_MS)
            .fetch_optional(&mut *tx),
    )
    .await?;
    let claim = steps[1].unwrap_or_default();
    // No row (the key was taken while the claim waited) or an existing one: not claimed.
    if row.is_none_or(|row| row.1.is_some()) {
        step(steps, 4, tx.rollback()).await?;
        return Ok((claim, false));
    }
    let (headers, body) = match order {
        Some(order) => {
            let created = step(steps, 2, Postgres::insert_order(&mut tx, account, order)).await?;
            let headers = format!(
                "location: /orders/{}\r\ncontent-type: application/json\r\n",
                created.id
            );
            let body = serde_json::to_vec(&created).expect("an order serializes");
            (headers, body)
        }
        None => (
            "location: /orders/1\r\ncontent-type: application/json\r\n".to_owned(),
            br#"{"id":1,"item":"tea","quantity":2,"amount_cents":1250,"created_at":"2026-12-01T00:00:00.000000Z"}"#.to_vec(),
        ),
    };
    // The runtime learns from the update count that it ran in its own transaction.
    step(
        steps,
        3,
        sqlx::query(protocol::COMPLETE)
            .bind(&scope)
            .bind(key)
            .bind(201i16)
            .bind(headers.as_bytes())
            .bind(&body)
            .execute(&mut *tx),
    )
    .await?;
    step(steps, 4, tx.commit()).await?;
    Ok((claim, true))
}

/// Where one operation's time goes: each round trip's latency, on one connection so
/// that no other work queues in front of it.
#[derive(Debug)]
pub(crate) struct Breakdown {
    pub(crate) floor: Floor,
    pub(crate) steps: Vec<(&'static str, Stats)>,
    pub(crate) total: Stats,
}

pub(crate) async fn breakdown(
    pool: &PgPool,
    floor: Floor,
    duration: Duration,
    keys: &KeyLog,
) -> Result<Breakdown, String> {
    let order = order();
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| format!("the breakdown cannot get a connection: {e}"))?;
    let mut steps: Vec<Stats> = STEPS.iter().map(|_| Stats::default()).collect();
    let mut total = Stats::default();
    let start = Instant::now();
    while start.elapsed() < duration {
        let (account, key) = match floor {
            Floor::Replay => keys
                .next()
                .ok_or("breakdown of a replay: no completed keys")?,
            _ => new_key(),
        };
        let mut times = [None; 5];
        let started = Instant::now();
        once(
            &mut conn,
            floor,
            Account(i64::from(account)),
            &key,
            &order,
            &mut times,
        )
        .await
        .map_err(|e| format!("breakdown of {floor:?}: {e}"))?;
        total.record(started.elapsed());
        if floor == Floor::Protocol {
            // The replay's breakdown, which runs next, sends these again.
            keys.push(account, key);
        }
        total.ok += 1;
        for (stats, time) in steps.iter_mut().zip(times) {
            if let Some(time) = time {
                stats.record(time);
                stats.ok += 1;
            }
        }
    }
    total.elapsed = start.elapsed();
    Ok(Breakdown {
        floor,
        steps: STEPS
            .iter()
            .zip(steps)
            .filter(|(_, stats)| stats.ok > 0)
            .map(|(name, stats)| (*name, stats))
            .collect(),
        total,
    })
}
