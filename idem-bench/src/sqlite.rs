//! The embedded default: `bare`, `hand`, `idem` and `replay` on a SQLite file, at several
//! connection counts side by side, and the ceiling that SQLite's single writer puts on
//! first executions.
//!
//! The file lives in a temporary directory (`idem-testkit`'s `TestSqlite`) on the
//! machine's disk; the server opens it as the example does (WAL, a 5 s busy timeout) with
//! the `synchronous` setting under test. SQLite runs inside the server process, so the
//! CPU per request is the server's and the load generator's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::TestSqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
};
use sqlx::{AssertSqlSafe, Connection, Executor, Sqlite};

use crate::child::Server;
use crate::cpu::Probe;
use crate::load::{self, HttpLoad, KeyLog, Mode, new_key};
use crate::options::Options;
use crate::orders::{Account, OrderStore};
use crate::scenario::Scenario;
use crate::stats::Stats;

/// The scenarios measured on SQLite, in the order of the table.
pub(crate) const SCENARIOS: [Scenario; 4] = [
    Scenario::Bare,
    Scenario::Hand,
    Scenario::Idem,
    Scenario::Replay,
];

/// Everything the SQLite part measured, one run per `synchronous` setting.
#[derive(Debug)]
pub(crate) struct SqliteResults {
    pub(crate) runs: Vec<SqliteRun>,
    pub(crate) server_pool: u32,
}

/// One `synchronous` setting: its own file, server and numbers.
#[derive(Debug)]
pub(crate) struct SqliteRun {
    /// As `PRAGMA synchronous` was asked for (`full`, `normal`, ...).
    pub(crate) synchronous: String,
    /// What the database reports: `sqlite_version()`, `journal_mode`, `synchronous`.
    pub(crate) version: String,
    pub(crate) journal_mode: String,
    pub(crate) synchronous_read: i64,
    /// The file system that holds the file.
    pub(crate) file_system: String,
    /// Per connection count, the scenarios in [`SCENARIOS`] order.
    pub(crate) table: Vec<(usize, Vec<(Scenario, Stats)>)>,
    /// One connection of this process committing the example's insert, autocommit: what
    /// one commit costs on this disk.
    pub(crate) commit: Stats,
    /// One connection of this process running a first execution's write transaction
    /// (the hand-written baseline's: `BEGIN IMMEDIATE`, claim, insert, completion,
    /// `COMMIT`): the most first executions per second one writer can make.
    pub(crate) writer: Stats,
}

impl SqliteRun {
    /// The stats of `scenario` at `connections`.
    pub(crate) fn stats(&self, connections: usize, scenario: Scenario) -> Option<&Stats> {
        self.table
            .iter()
            .find(|(c, _)| *c == connections)?
            .1
            .iter()
            .find(|(s, _)| *s == scenario)
            .map(|(_, stats)| stats)
    }
}

pub(crate) async fn run(options: &Options) -> Result<SqliteResults, String> {
    let most = options
        .sqlite_connections
        .iter()
        .copied()
        .max()
        .unwrap_or(1);
    // As many connections as requests in flight, and the example's 20 at least.
    let server_pool = (most + 4).max(20) as u32;
    let mut runs = Vec::new();
    for synchronous in &options.sqlite_synchronous {
        runs.push(run_one(options, synchronous, server_pool).await?);
    }
    Ok(SqliteResults { runs, server_pool })
}

async fn run_one(
    options: &Options,
    synchronous: &str,
    server_pool: u32,
) -> Result<SqliteRun, String> {
    let db = TestSqlite::new();
    eprintln!(
        "idem-bench: SQLite {} (synchronous={synchronous})",
        db.path().display()
    );
    let pool = open(&db, synchronous).await?;
    create_schema(&pool).await?;
    let version: String = scalar(&pool, "SELECT sqlite_version()").await?;
    let journal_mode: String = scalar(&pool, "PRAGMA journal_mode").await?;
    let synchronous_read: i64 = scalar(&pool, "PRAGMA synchronous").await?;

    let server = Server::start_with_args(
        &db.url(),
        server_pool,
        options.acquire_ping,
        &["--synchronous", synchronous],
        &[],
        Duration::from_secs(60),
    )?;
    eprintln!(
        "idem-bench: SQLite server pid {} on {}, pool {server_pool}",
        server.pid(),
        server.addr
    );
    let completed = Arc::new(KeyLog::default());
    let load_of = |scenario: Scenario| -> HttpLoad {
        let (path, mode) = match scenario {
            Scenario::Bare => ("/bare/orders", Mode::Fresh(None)),
            Scenario::Hand => ("/hand/orders", Mode::Fresh(None)),
            Scenario::Idem => ("/idem/orders", Mode::Fresh(Some(Arc::clone(&completed)))),
            Scenario::Replay => ("/idem/orders", Mode::Replay(Arc::clone(&completed))),
            other => unreachable!("{} is not a SQLite scenario", other.name()),
        };
        HttpLoad { path, mode }
    };

    // Warm-up: every scenario once, `idem` before `replay` so it has keys to send.
    let warm_up = options.seconds.min(Duration::from_secs(2));
    for scenario in SCENARIOS {
        let stats = measure(&server, &load_of(scenario), 4, warm_up).await?;
        if stats.errors > 0 {
            return Err(format!(
                "SQLite warm-up of {}: {} errors, the first: {}",
                scenario.name(),
                stats.errors,
                stats.first_error.unwrap_or_default()
            ));
        }
    }

    let mut table: Vec<(usize, Vec<(Scenario, Stats)>)> = options
        .sqlite_connections
        .iter()
        .map(|&c| (c, SCENARIOS.map(|s| (s, Stats::default())).to_vec()))
        .collect();
    let mut commit = Stats::default();
    let mut writer = Stats::default();
    for round in 0..options.rounds as usize {
        for (c, row) in &mut table {
            // Each round starts one scenario later, as in the PostgreSQL table.
            for i in 0..SCENARIOS.len() {
                let index = (round + i) % SCENARIOS.len();
                let scenario = SCENARIOS[index];
                let stats = measure(&server, &load_of(scenario), *c, options.seconds).await?;
                let cpu = stats.cpu_per_request().unwrap_or_default();
                eprintln!(
                    "idem-bench: SQLite {synchronous} round {}/{} c={c:<3} {:<7} {:>6.0} req/s  \
                     p50 {:>7.2} ms  p99 {:>7.2} ms  cpu µs/req {:>4.0} {:>4.0}  503 {}{}",
                    round + 1,
                    options.rounds,
                    scenario.name(),
                    stats.rate(),
                    stats.ms(0.5),
                    stats.ms(0.99),
                    cpu[0],
                    cpu[2],
                    stats.busy,
                    if stats.errors > 0 {
                        format!("  {} errors", stats.errors)
                    } else {
                        String::new()
                    }
                );
                row[index].1.add_round(&stats);
            }
        }
        commit.add_round(&floor(&pool, Write::Commit, options.seconds).await?);
        writer.add_round(&floor(&pool, Write::Transaction, options.seconds).await?);
        eprintln!(
            "idem-bench: SQLite {synchronous} round {}/{} one writer: {:.0} commits/s, {:.0} \
             write transactions/s",
            round + 1,
            options.rounds,
            commit.round_rates.last().copied().unwrap_or_default(),
            writer.round_rates.last().copied().unwrap_or_default()
        );
    }
    server.stop();
    pool.close().await;
    let file_system = file_system(db.path());
    Ok(SqliteRun {
        synchronous: synchronous.to_owned(),
        version,
        journal_mode,
        synchronous_read,
        file_system,
        table,
        commit,
        writer,
    })
}

/// One HTTP load, with the CPU it cost the server and this process.
async fn measure(
    server: &Server,
    load: &HttpLoad,
    connections: usize,
    duration: Duration,
) -> Result<Stats, String> {
    let probe = Probe::without_database(Some(server.pid()));
    let before = probe.sample();
    let mut stats = load::run(server.addr, load, connections, duration).await?;
    stats.cpu = probe.sample() - before;
    Ok(stats)
}

/// This process's pool on the file, opened as the server opens it.
pub(crate) async fn open(db: &TestSqlite, synchronous: &str) -> Result<SqlitePool, String> {
    let options = SqliteConnectOptions::new()
        .filename(db.path())
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5))
        .synchronous(
            synchronous
                .parse()
                .map_err(|e| format!("synchronous={synchronous}: {e}"))?,
        );
    SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .map_err(|e| format!("cannot open {}: {e}", db.path().display()))
}

/// idem's schema, the example's `orders` and the hand-written baseline's `hand_keys`.
pub(crate) async fn create_schema(pool: &SqlitePool) -> Result<(), String> {
    idem::migrate(pool)
        .await
        .map_err(|e| format!("idem's SQLite migrations failed: {e}"))?;
    Sqlite::migrator()
        .run(pool)
        .await
        .map_err(|e| format!("the example's SQLite migrations failed: {e}"))?;
    pool.execute(AssertSqlSafe(crate::hand::SQLITE_SCHEMA))
        .await
        .map_err(|e| format!("creating hand_keys on SQLite failed: {e}"))?;
    Ok(())
}

async fn scalar<T>(pool: &SqlitePool, sql: &'static str) -> Result<T, String>
where
    T: for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite> + Send + Unpin,
{
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

/// What one connection of this process writes, over and over.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// The insert, autocommit: one commit.
    Commit,
    /// A first execution's transaction, the hand-written baseline's statements.
    Transaction,
}

/// One writer as fast as it goes for `duration`: with the database's one write lock held
/// by nobody else, its rate is the most such writes the file takes per second.
async fn floor(pool: &SqlitePool, write: Write, duration: Duration) -> Result<Stats, String> {
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| format!("the SQLite floor cannot get a connection: {e}"))?;
    let probe = Probe::without_database(None);
    let before = probe.sample();
    let order = crate::floor::order();
    let mut stats = Stats::default();
    let start = Instant::now();
    while start.elapsed() < duration {
        let (account, key) = new_key();
        let account = Account(i64::from(account));
        let started = Instant::now();
        let result = match write {
            Write::Commit => Sqlite::insert_order(&mut conn, account, &order)
                .await
                .map(drop),
            Write::Transaction => transaction(&mut conn, account, &key, &order).await,
        };
        stats.record(started.elapsed());
        match result {
            Ok(()) => {
                stats.ok += 1;
                stats.executed += 1;
            }
            Err(error) => stats.error(|| error.to_string()),
        }
    }
    stats.elapsed = start.elapsed();
    stats.cpu = probe.sample() - before;
    if stats.errors > 0 {
        return Err(format!(
            "the SQLite floor ({write:?}): {} errors, the first: {}",
            stats.errors,
            stats.first_error.unwrap_or_default()
        ));
    }
    Ok(stats)
}

/// The hand-written baseline's statements for a new key (`crate::hand`, SQLite).
async fn transaction(
    conn: &mut SqliteConnection,
    account: Account,
    key: &str,
    order: &crate::orders::NewOrder,
) -> sqlx::Result<()> {
    let mut tx = conn.begin_with(crate::hand::SQLITE_BEGIN).await?;
    let claimed: Option<bool> = sqlx::query_scalar(crate::hand::SQLITE_CLAIM)
        .bind(account.0)
        .bind(key)
        .bind([7u8; 32].as_slice())
        .bind("POST")
        .bind("/hand/orders")
        .fetch_optional(&mut *tx)
        .await?;
    if claimed.is_none() {
        return Err(sqlx::Error::Protocol("the new key existed".into()));
    }
    let created = Sqlite::insert_order(&mut tx, account, order).await?;
    let body = serde_json::to_vec(&created).expect("an order serializes");
    sqlx::query(crate::hand::COMPLETE)
        .bind(account.0)
        .bind(key)
        .bind(format!("/orders/{}", created.id))
        .bind(&body)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// The mount that holds `path` (its device and type), from `/proc/mounts`.
fn file_system(path: &std::path::Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point)
                .then(|| (point.len(), format!("{kind} on {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".to_owned(), |(_, what)| what)
}
