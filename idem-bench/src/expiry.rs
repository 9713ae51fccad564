//! Expiry: how fast idem's expiry task (`idem::admin::Expiry`) deletes expired keys, against
//! the same batched DELETE sent as plain SQL, and what a sweep at the task's default
//! pace does to live traffic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem::admin::Expiry;
use idem_testkit::TestDb;
use sqlx::{AssertSqlSafe, PgPool};

use crate::child::Server;
use crate::db;
use crate::load::{self, HttpLoad, Mode};
use crate::options::Options;
use crate::scale::{preload, settle};
use crate::stats::Stats;

/// idem's batch as the runtime sends it (`store/postgres/expiry.rs`, `batch_script`
/// with the default batch size): copied, since the runtime keeps its SQL private, so the
/// plain-SQL sweep runs exactly the statement the task runs, minus the task around it.
/// If the runtime's batch changes, change this with it.
const PLAIN_BATCH: &str = "\
SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; \
WITH batch AS MATERIALIZED (
    SELECT scope, idem_key
      FROM idem_keys
     WHERE expires_at <= now() AND (locked_until IS NULL OR locked_until <= now())
     ORDER BY expires_at
     LIMIT 1000
       FOR UPDATE SKIP LOCKED
)
DELETE FROM idem_keys k
 USING batch
 WHERE k.scope = batch.scope AND k.idem_key = batch.idem_key";

/// Sweeps of all expired keys, added up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sweep {
    pub(crate) rows: u64,
    pub(crate) batches: u64,
    pub(crate) secs: f64,
}

impl Sweep {
    fn add(&mut self, other: Sweep) {
        self.rows += other.rows;
        self.batches += other.batches;
        self.secs += other.secs;
    }

    pub(crate) fn rate(&self) -> f64 {
        self.rows as f64 / self.secs.max(1e-9)
    }
}

/// Live `idem` load without and during a sweep at the task's default pace, as
/// (without, during).
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// As fast as the connections go.
    pub(crate) saturated: (Stats, Stats),
    /// At `rate`, half of what the saturated load reached.
    pub(crate) half: (Stats, Stats),
    pub(crate) rate: f64,
    /// Rows the task deleted while the load ran.
    pub(crate) rows_during: u64,
}

#[derive(Debug)]
pub(crate) struct ExpiryResults {
    /// Why something is missing, or empty.
    pub(crate) note: String,
    pub(crate) expired_keys: u64,
    pub(crate) plain: Option<Sweep>,
    pub(crate) idem: Option<Sweep>,
    pub(crate) live: Option<Live>,
}

impl ExpiryResults {
    pub(crate) fn skipped(why: &str) -> Self {
        Self {
            note: why.to_owned(),
            expired_keys: 0,
            plain: None,
            idem: None,
            live: None,
        }
    }
}

pub(crate) async fn run(options: &Options, server_pool: u32) -> Result<ExpiryResults, String> {
    let db = TestDb::new().await;
    let pool = db::pool(&db, 4).await?;
    db::create_schema(&pool).await?;
    let n = options.expired_keys;

    // Twice each, A B B A, so that neither goes first on a fresher table every time.
    let mut plain = Sweep::default();
    let mut idem = Sweep::default();
    for order in [[false, true], [true, false]] {
        for use_idem in order {
            expired(&pool, n).await?;
            let sweep = if use_idem {
                idem_sweep(&pool).await?
            } else {
                plain_sweep(&pool).await?
            };
            eprintln!(
                "idem-bench: expiry: {} sweep of {n} keys: {:.0} rows/s",
                if use_idem { "idem's" } else { "the plain-SQL" },
                sweep.rate()
            );
            if use_idem { &mut idem } else { &mut plain }.add(sweep);
        }
    }

    expired(&pool, n).await?;
    let live = live(options, &db, &pool, server_pool).await?;
    Ok(ExpiryResults {
        note: String::new(),
        expired_keys: n,
        plain: Some(plain),
        idem: Some(idem),
        live: Some(live),
    })
}

/// `n` keys that expired an hour ago, in a table that has settled.
async fn expired(pool: &PgPool, n: u64) -> Result<(), String> {
    // A range of key numbers of its own each time, so keys that survived an earlier
    // load never collide with new ones. (Numbers stay below 2^31 so the scatter in the
    // preload's SQL stays within bigint.)
    static LOADS: AtomicU64 = AtomicU64::new(1);
    let base = LOADS.fetch_add(1, Ordering::Relaxed) * 200_000_000;
    preload(pool, base, base + n, true).await?;
    settle(pool).await
}

async fn plain_sweep(pool: &PgPool) -> Result<Sweep, String> {
    let started = Instant::now();
    let mut sweep = Sweep {
        rows: 0,
        batches: 0,
        secs: 0.0,
    };
    loop {
        let deleted = sqlx::raw_sql(AssertSqlSafe(PLAIN_BATCH))
            .execute(pool)
            .await
            .map_err(|e| format!("the plain sweep failed: {e}"))?
            .rows_affected();
        if deleted == 0 {
            break;
        }
        sweep.rows += deleted;
        sweep.batches += 1;
    }
    sweep.secs = started.elapsed().as_secs_f64();
    Ok(sweep)
}

/// The task's own sweep, with no pause between batches.
async fn idem_sweep(pool: &PgPool) -> Result<Sweep, String> {
    let started = Instant::now();
    // The plain loop's batch size: the comparison is of the same DELETE, sent by idem's
    // task or by a bare loop (the task's default batch is smaller, for live latency).
    let report = Expiry::new(pool.clone())
        .batch_size(1000)
        .pause(Duration::ZERO)
        .sweep_once()
        .await
        .map_err(|e| format!("idem's sweep failed: {e}"))?;
    Ok(Sweep {
        rows: report.rows_deleted,
        batches: report.batches,
        secs: started.elapsed().as_secs_f64(),
    })
}

/// `idem` load with no sweep, then during a sweep at the task's default pace, twice
/// (A B A B): first as fast as the connections go, which leaves no CPU idle on this
/// machine, then at half the rate that reached, which leaves room as a production server
/// does. The task runs in this process, beside the load generator; what it costs live
/// traffic is the database's work, which is the same wherever the task runs.
async fn live(
    options: &Options,
    db: &TestDb,
    pool: &PgPool,
    server_pool: u32,
) -> Result<Live, String> {
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
    let mut live = Live::default();
    for half in [false, true] {
        let rate = (live.saturated.0.rate() / 2.0).max(1.0);
        if half {
            live.rate = rate;
        }
        let run = async || {
            if half {
                load::run_at_rate(
                    server.addr,
                    &load,
                    options.connections,
                    options.seconds,
                    rate,
                )
                .await
            } else {
                load::run(server.addr, &load, options.connections, options.seconds).await
            }
        };
        let mut quiet = Stats::default();
        let mut sweeping = Stats::default();
        for _ in 0..2 {
            quiet.add_round(&run().await?);
            // The task's defaults (batches of 100, 5 ms apart) unless `--sweep-pace` says
            // otherwise; the first sweep starts at once.
            let expiry = match options.sweep_pace {
                Some((rows, pause)) => Expiry::new(pool.clone()).batch_size(rows).pause(pause),
                None => Expiry::new(pool.clone()),
            };
            let handle = expiry.spawn();
            let stats = run().await?;
            let task = handle.stats();
            handle.stop().await;
            if task.sweeps > 0 {
                eprintln!(
                    "idem-bench: expiry: the sweep ended before the load did; raise \
                     --expired-keys"
                );
            }
            live.rows_during += task.rows_deleted;
            sweeping.add_round(&stats);
        }
        eprintln!(
            "idem-bench: expiry: live p99 ({}) {:.2} ms without a sweep, {:.2} ms during one",
            if half { "half load" } else { "saturated" },
            quiet.ms(0.99),
            sweeping.ms(0.99),
        );
        if half {
            live.half = (quiet, sweeping);
        } else {
            live.saturated = (quiet, sweeping);
        }
    }
    server.stop();
    Ok(live)
}
