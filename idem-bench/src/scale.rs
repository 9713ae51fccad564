//! How the claim scales with the size of the key table: its latency with a small and a
//! big table (10 thousand and 10 million keys by default), in a database of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem_testkit::TestDb;
use sqlx::PgPool;
use tokio::task::JoinSet;

use crate::child::Server;
use crate::db;
use crate::floor::protocol_once;
use crate::load::{self, HttpLoad, Mode, new_key, splitmix64};
use crate::options::Options;
use crate::orders::Account;
use crate::stats::Stats;

/// One table size.
#[derive(Debug)]
pub(crate) struct ScalePoint {
    /// Keys in the table when the measurement started.
    pub(crate) keys: u64,
    /// The claim statement on a new key (the insert path of every first execution).
    pub(crate) claim_new: Stats,
    /// The claim statement on a key that exists (the lookup path of every replay).
    pub(crate) claim_existing: Stats,
    /// Whole `#[idempotent]` requests over HTTP.
    pub(crate) http: Stats,
    /// Seconds it took to load the keys that made this size.
    pub(crate) preload_secs: f64,
}

#[derive(Debug)]
pub(crate) struct ScaleResults {
    pub(crate) small: ScalePoint,
    pub(crate) big: ScalePoint,
}

pub(crate) async fn run(options: &Options, server_pool: u32) -> Result<ScaleResults, String> {
    let db = TestDb::new().await;
    let pool = db::pool(&db, options.connections as u32 + 2).await?;
    db::create_schema(&pool).await?;

    let started = Instant::now();
    preload(&pool, 0, options.small_keys, false).await?;
    settle(&pool).await?;
    let small_secs = started.elapsed().as_secs_f64();
    let small = measure(
        options,
        &db,
        &pool,
        options.small_keys,
        small_secs,
        server_pool,
    )
    .await?;

    let started = Instant::now();
    preload(&pool, options.small_keys, options.big_keys, false).await?;
    settle(&pool).await?;
    let big_secs = started.elapsed().as_secs_f64();
    let big = measure(options, &db, &pool, options.big_keys, big_secs, server_pool).await?;
    Ok(ScaleResults { small, big })
}

/// The key of preloaded row `i`, computed the same way in SQL and here: eight hex digits
/// that scatter consecutive rows over the whole index (as random client keys do), then
/// the row number, which makes it unique. 36 characters, like a UUID.
pub(crate) fn preloaded_key(i: u64) -> (i64, String) {
    let scatter = i.wrapping_mul(2_654_435_761) % (1 << 32);
    ((i % 1000) as i64 + 1, format!("{scatter:08x}-{i:027}"))
}

const PRELOAD: &str = "\
INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state, response_status,
                       response_headers, response_body, created_at, expires_at)
SELECT ((i % 1000) + 1)::text,
       lpad(to_hex((i * 2654435761) % 4294967296), 8, '0') || '-' || lpad(i::text, 27, '0'),
       sha256(int8send(i)), 'POST', '/idem/orders', 'completed', 201,
       convert_to('location: /orders/' || i || E'\\r\\ncontent-type: application/json\\r\\n', 'UTF8'),
       convert_to('{\"id\":' || i || ',\"item\":\"tea\",\"quantity\":2,\"amount_cents\":1250,'
                  '\"created_at\":\"2026-12-01T00:00:00.000000Z\"}', 'UTF8'),
       CASE WHEN $3 THEN now() - interval '25 hours' ELSE now() END,
       CASE WHEN $3 THEN now() - interval '1 hour' ELSE now() + interval '24 hours' END
  FROM generate_series($1::bigint, $2::bigint) AS i";

/// Inserts completed keys numbered `from..to`, like the ones a day of traffic leaves:
/// expired an hour ago when `expired`, else expiring in a day. In batches of a million,
/// each its own transaction, with progress on stderr.
pub(crate) async fn preload(
    pool: &PgPool,
    from: u64,
    to: u64,
    expired: bool,
) -> Result<(), String> {
    const BATCH: u64 = 1_000_000;
    let started = Instant::now();
    let mut next = from;
    while next < to {
        let end = (next + BATCH).min(to);
        let query = sqlx::query(PRELOAD)
            .bind(next as i64)
            .bind(end as i64 - 1)
            .bind(expired);
        query
            .execute(pool)
            .await
            .map_err(|e| format!("preloading keys failed: {e}"))?;
        next = end;
        if to - from > BATCH {
            eprintln!(
                "idem-bench: preloaded {next} of {to} keys{} ({:.0} s)",
                if expired { " (expired)" } else { "" },
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// What a table that has been live for a while looks like: vacuumed and analyzed, with
/// the loading's dirty pages written out, so no measurement pays for the load.
pub(crate) async fn settle(pool: &PgPool) -> Result<(), String> {
    for statement in ["VACUUM ANALYZE idem_keys", "CHECKPOINT"] {
        sqlx::query(statement)
            .execute(pool)
            .await
            .map_err(|e| format!("{statement} failed: {e}"))?;
    }
    Ok(())
}

async fn measure(
    options: &Options,
    db: &TestDb,
    pool: &PgPool,
    keys: u64,
    preload_secs: f64,
    server_pool: u32,
) -> Result<ScalePoint, String> {
    eprintln!("idem-bench: scale, {keys} keys: claims");
    let claim_new = claims(pool, options.connections, options.seconds, None).await?;
    let claim_existing = claims(pool, options.connections, options.seconds, Some(keys)).await?;
    eprintln!("idem-bench: scale, {keys} keys: HTTP");
    let server = Server::start_with(
        db.url(),
        server_pool,
        options.acquire_ping,
        &[],
        Duration::from_secs(60),
    )?;
    let load = HttpLoad {
        path: "/idem/orders",
        mode: Mode::Fresh(None),
    };
    let http = load::run(server.addr, &load, options.connections, options.seconds).await?;
    server.stop();
    eprintln!(
        "idem-bench: scale, {keys} keys: claim p50 {:.2} ms p99 {:.2} ms; existing p99 {:.2} ms; \
         HTTP p99 {:.2} ms",
        claim_new.ms(0.5),
        claim_new.ms(0.99),
        claim_existing.ms(0.99),
        http.ms(0.99)
    );
    Ok(ScalePoint {
        keys,
        claim_new,
        claim_existing,
        http,
        preload_secs,
    })
}

/// idem's statements on `workers` connections for `duration`, timing the claim alone:
/// on new keys, or with `existing = Some(n)` on random keys among the `n` preloaded.
async fn claims(
    pool: &PgPool,
    workers: usize,
    duration: Duration,
    existing: Option<u64>,
) -> Result<Stats, String> {
    static PICK: AtomicU64 = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        // A connection of its own, as in the floor: no pool round trips around the claim.
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| format!("the claims cannot get a connection: {e}"))?;
        tasks.spawn(async move {
            let mut stats = Stats::default();
            while Instant::now() < deadline {
                let (account, key) = match existing {
                    Some(n) => preloaded_key(splitmix64(PICK.fetch_add(1, Ordering::Relaxed)) % n),
                    None => {
                        let (account, key) = new_key();
                        (i64::from(account), key)
                    }
                };
                match protocol_once(&mut conn, Account(account), &key, None, &mut [None; 5]).await {
                    Ok((claim, claimed)) if claimed == existing.is_none() => {
                        stats.record(claim);
                        stats.ok += 1;
                    }
                    Ok((_, claimed)) => stats.error(|| format!("claimed: {claimed}, key {key}")),
                    Err(error) => stats.error(|| error.to_string()),
                }
            }
            stats
        });
    }
    let mut stats = Stats::default();
    while let Some(part) = tasks.join_next().await {
        stats.absorb(&part.map_err(|e| format!("a claim task failed: {e}"))?);
    }
    stats.elapsed = start.elapsed();
    if stats.errors > 0 {
        return Err(format!(
            "claims: {} errors, the first: {}",
            stats.errors,
            stats.first_error.unwrap_or_default()
        ));
    }
    Ok(stats)
}
