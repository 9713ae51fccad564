//! `idem-failover`: the example service on highly available PostgreSQL (two nodes managed
//! by Patroni with etcd, reached through HAProxy), SDK-like clients sending keyed
//! `POST /orders` and `POST /payments`, and the primary killed (SIGKILL to its Patroni and
//! PostgreSQL) several times so the standby takes over; then a checker.
//!
//! ```text
//! cargo build --example orders && cargo run -p idem-ha -- --replication sync
//! cargo run -p idem-ha -- --replication async
//! ```
//!
//! Every client is an account and sends one logical operation at a time, each with a
//! fresh `Idempotency-Key`, through `idem-client`, which retries connection errors, 409
//! and 5xx with backoff under the same key until it gets another answer. The checker then
//! verifies, for every operation a client saw acknowledged (201):
//!
//! - **lost**: its order (or payment) is in the database under the id the answer named,
//!   and its key row is there;
//! - **re-executed**: sending it again replays the acknowledged answer byte for byte
//!   (`Idempotent-Replayed: true`) rather than running it again;
//! - **duplicated**: no operation left two orders (or payments);
//! - the relay delivered one receipt per acknowledged payment, and an expiry sweep after
//!   the failovers deletes keys moved past their retention.
//!
//! With `--replication sync` any of these is a violation (exit 1). With
//! `--replication async` the lost and re-executed operations are what asynchronous
//! replication costs: they are reported, and only the other checks fail the run. Exit 2
//! when the run could not be set up (a component missing: `bash .ci/run` installs them).

mod cluster;
mod host;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use cluster::{Ha, Replication};
use workload::{Acked, Kind, Stats};

/// Failover test for idem on Patroni-managed PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "idem-failover", version)]
struct Args {
    /// Synchronous (zero loss required) or asynchronous (loss measured) replication.
    #[arg(long, value_enum, default_value = "sync")]
    replication: Replication,
    /// How many times the primary is killed.
    #[arg(long, default_value_t = 2)]
    failovers: u32,
    /// Concurrent clients (one account each).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Example processes sharing the database.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Seconds of steady load before each kill and after the last failover.
    #[arg(long, default_value_t = 4)]
    steady: u64,
    /// The example binary (`cargo build --example orders` makes it).
    #[arg(long, default_value = "target/debug/examples/orders")]
    server: PathBuf,
}

/// One kill of the primary and what followed.
#[derive(Debug)]
struct Failover {
    killed: String,
    promoted: String,
    at: Instant,
    /// When the other node answered `GET /primary`.
    promoted_after: Duration,
    /// When the killed node was back as a (synchronous) standby.
    rejoined_after: Duration,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("idem-failover: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<bool, String> {
    if !args.server.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --example orders` or pass --server",
            args.server.display()
        ));
    }
    let replication = args.replication;
    println!("idem-failover: starting etcd, two Patroni nodes ({replication:?}) and HAProxy");
    let started = Instant::now();
    let ha = tokio::task::spawn_blocking(move || Ha::start(replication))
        .await
        .map_err(|e| e.to_string())??;
    println!(
        "idem-failover: cluster up in {:.1}s, primary {}, service URL {}",
        started.elapsed().as_secs_f64(),
        ha.primary().map_or("?", |i| ha.nodes[i].name.as_str()),
        ha.url()
    );
    let services = workload::Services::start(&args.server, &ha.url(), args.instances).await;
    let services = match services {
        Ok(s) => s,
        Err(e) => return Err(format!("{e}\n{}", ha.logs())),
    };
    let stats = Arc::new(Stats::default());
    let run = workload::Run::start(&services, args.clients, stats.clone());

    // The fault driver blocks (process control and polling): a thread of its own.
    let failovers = args.failovers;
    let steady = Duration::from_secs(args.steady);
    let driver =
        tokio::task::spawn_blocking(move || drive_faults(ha, failovers, steady, replication));
    let (ha, faults) = driver.await.map_err(|e| e.to_string())?;
    let acked = run.stop().await;
    let faults = match faults {
        Ok(f) => f,
        Err(e) => return Err(format!("{e}\n{}", ha.logs())),
    };

    let report = check(&ha, &services, &acked).await;
    services.stop().await;
    let report = match report {
        Ok(r) => r,
        Err(e) => return Err(format!("{e}\n{}", ha.logs())),
    };
    print_summary(replication, &faults, &stats, &acked, &report);
    drop(ha);
    let ok = report.violations(replication).is_empty();
    for v in report.violations(replication) {
        println!("VIOLATION: {v}");
    }
    Ok(ok)
}

/// Kills the primary `failovers` times: waits for the standby's promotion, starts the
/// killed node again and waits until it is a standby again, then lets the load run.
fn drive_faults(
    mut ha: Ha,
    failovers: u32,
    steady: Duration,
    replication: Replication,
) -> (Ha, Result<Vec<Failover>, String>) {
    let mut done = Vec::new();
    for _ in 0..failovers {
        std::thread::sleep(steady);
        let Some(primary) = ha.primary() else {
            return (ha, Err("no node is the primary before a kill".into()));
        };
        let other = 1 - primary;
        if let Err(e) = ha.wait_promotable(other, replication) {
            return (ha, Err(e));
        }
        let at = Instant::now();
        ha.kill_node(primary);
        if let Err(e) = ha.wait_role(other, "primary") {
            return (ha, Err(e));
        }
        let promoted_after = at.elapsed();
        if let Err(e) = ha.start_node(primary) {
            return (ha, Err(e));
        }
        if let Err(e) = ha.wait_standby(primary, replication) {
            return (ha, Err(e));
        }
        let rejoined_after = at.elapsed();
        println!(
            "idem-failover: killed {} ; {} primary after {:.1}s ; {} back as standby after {:.1}s",
            ha.nodes[primary].name,
            ha.nodes[other].name,
            promoted_after.as_secs_f64(),
            ha.nodes[primary].name,
            rejoined_after.as_secs_f64()
        );
        done.push(Failover {
            killed: ha.nodes[primary].name.clone(),
            promoted: ha.nodes[other].name.clone(),
            at,
            promoted_after,
            rejoined_after,
        });
    }
    std::thread::sleep(steady);
    (ha, Ok(done))
}

/// What the checker found.
#[derive(Debug, Default)]
struct Report {
    /// Acknowledged operations whose row or key is gone.
    lost: Vec<String>,
    /// Acknowledged operations that a later retry ran again (another answer).
    re_executed: Vec<String>,
    /// Operations with more than one order or payment row.
    duplicated: Vec<String>,
    /// Retries of acknowledged operations that failed outright.
    replay_failed: Vec<String>,
    /// Acknowledged payments without exactly one receipt.
    receipts_missing: Vec<String>,
    /// Rows the post-failover expiry sweep deleted, and how many it had to.
    expired: (u64, u64),
    expiry_error: Option<String>,
}

impl Report {
    fn violations(&self, replication: Replication) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |what: &str, list: &[String]| {
            if !list.is_empty() {
                out.push(format!(
                    "{} {what}: {:?}",
                    list.len(),
                    &list[..list.len().min(5)]
                ));
            }
        };
        if replication == Replication::Sync {
            add("acknowledged operations lost", &self.lost);
            add("acknowledged operations executed again", &self.re_executed);
        }
        add("operations executed twice", &self.duplicated);
        add("replays that failed", &self.replay_failed);
        add(
            "payments without exactly one receipt",
            &self.receipts_missing,
        );
        if let Some(e) = &self.expiry_error {
            out.push(format!("expiry sweep after the failovers failed: {e}"));
        } else if self.expired.0 < self.expired.1 {
            out.push(format!(
                "expiry sweep deleted {} of the {} keys moved past their retention",
                self.expired.0, self.expired.1
            ));
        }
        out
    }
}

async fn check(ha: &Ha, services: &workload::Services, acked: &[Acked]) -> Result<Report, String> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&ha.url())
        .await
        .map_err(|e| format!("checker cannot connect through HAProxy: {e}"))?;
    let mut report = Report::default();

    // Rows per operation, read before any replay can run a lost operation again.
    let orders: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT item, count(*), min(id) FROM orders GROUP BY item")
            .fetch_all(&pool)
            .await
            .map_err(|e| e.to_string())?;
    let orders: HashMap<String, (i64, i64)> = orders
        .into_iter()
        .map(|(item, n, id)| (item, (n, id)))
        .collect();
    let payments: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT account_id, amount_cents, count(*), min(id) FROM payments \
         GROUP BY account_id, amount_cents",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| e.to_string())?;
    let payments: HashMap<(i64, i64), (i64, i64)> = payments
        .into_iter()
        .map(|(a, c, n, id)| ((a, c), (n, id)))
        .collect();
    let keys: Vec<(String, String)> =
        sqlx::query_as("SELECT scope, idem_key FROM idem_keys WHERE state = 'completed'")
            .fetch_all(&pool)
            .await
            .map_err(|e| e.to_string())?;
    let keys: std::collections::HashSet<(String, String)> = keys.into_iter().collect();
    for (item, (n, _)) in &orders {
        if *n > 1 {
            report.duplicated.push(format!("order {item} ({n} rows)"));
        }
    }
    for ((account, amount), (n, _)) in &payments {
        if *n > 1 {
            report
                .duplicated
                .push(format!("payment {account}/{amount} ({n} rows)"));
        }
    }
    for op in acked {
        let id = op.id();
        let row = match op.kind {
            Kind::Order => orders.get(&op.key).map(|&(_, id)| id),
            Kind::Payment => payments.get(&(op.account, op.amount)).map(|&(_, id)| id),
        };
        let key_kept = keys.contains(&(op.account.to_string(), op.key.clone()));
        if row != id || !key_kept {
            report.lost.push(op.key.clone());
        }
    }

    // Every acknowledged operation sent again, with its key.
    for op in acked {
        match services.replay(op).await {
            Ok((status, body, replayed)) => {
                if status != op.status || body != op.body || !replayed {
                    report.re_executed.push(op.key.clone());
                }
            }
            Err(e) => report.replay_failed.push(format!("{}: {e}", op.key)),
        }
    }

    // The relay: one receipt per acknowledged payment (it delivers at least once and
    // deduplicates by message id), given a minute to catch up.
    let paid: Vec<i64> = acked
        .iter()
        .filter(|op| op.kind == Kind::Payment)
        .filter_map(Acked::id)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT payment_id, count(*) FROM receipts WHERE payment_id = ANY($1) \
             GROUP BY payment_id",
        )
        .bind(&paid)
        .fetch_all(&pool)
        .await
        .map_err(|e| e.to_string())?;
        let one: std::collections::HashSet<i64> =
            rows.iter().filter(|r| r.1 == 1).map(|r| r.0).collect();
        let missing: Vec<String> = paid
            .iter()
            .filter(|id| !one.contains(id))
            .map(|id| format!("payment {id}"))
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            report.receipts_missing = missing;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Expiry after the failovers: the first acknowledged keys moved past their retention,
    // then one sweep on the current primary.
    let expire: Vec<&Acked> = acked.iter().take(50).collect();
    let scopes: Vec<String> = expire.iter().map(|op| op.account.to_string()).collect();
    let names: Vec<String> = expire.iter().map(|op| op.key.clone()).collect();
    let moved = sqlx::query(
        "UPDATE idem_keys SET expires_at = now() - interval '1 second' \
         WHERE (scope, idem_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
    )
    .bind(&scopes)
    .bind(&names)
    .execute(&pool)
    .await
    .map_err(|e| e.to_string())?
    .rows_affected();
    match idem_runtime::admin::Expiry::new(pool.clone())
        .sweep_once()
        .await
    {
        Ok(sweep) => report.expired = (sweep.rows_deleted, moved),
        Err(e) => report.expiry_error = Some(e.to_string()),
    }
    pool.close().await;
    Ok(report)
}

fn print_summary(
    replication: Replication,
    faults: &[Failover],
    stats: &Stats,
    acked: &[Acked],
    report: &Report,
) {
    let orders = acked.iter().filter(|op| op.kind == Kind::Order).count();
    println!("idem-failover: summary ({replication:?} replication)");
    println!(
        "  operations acknowledged: {} ({orders} orders, {} payments); given up: {}",
        acked.len(),
        acked.len() - orders,
        stats.given_up()
    );
    println!("  attempts: {}", stats.summary());
    for (i, f) in faults.iter().enumerate() {
        let outage = stats
            .first_success_sent_after(f.at)
            .map(|t| format!("{:.1}s", t.duration_since(f.at).as_secs_f64()))
            .unwrap_or_else(|| "never".into());
        let end = f.at + f.rejoined_after + Duration::from_secs(2);
        let window = stats.counts_between(f.at, end);
        let (stall, stall_end) = stats.longest_stall(f.at, end);
        println!(
            "  failover {}: killed {}, {} promoted after {:.1}s, killed node back after {:.1}s; \
             first acknowledged attempt sent after the kill answered after {outage}; \
             longest stretch without a 201: {:.1}s, ending {:.1}s after the kill; {window}",
            i + 1,
            f.killed,
            f.promoted,
            f.promoted_after.as_secs_f64(),
            f.rejoined_after.as_secs_f64(),
            stall.as_secs_f64(),
            stall_end.duration_since(f.at).as_secs_f64(),
        );
    }
    println!(
        "  lost: {}; executed again on retry: {}; executed twice: {}; replays failed: {}; \
         payments without one receipt: {}; expiry sweep deleted {} of {} expired keys",
        report.lost.len(),
        report.re_executed.len(),
        report.duplicated.len(),
        report.replay_failed.len(),
        report.receipts_missing.len(),
        report.expired.0,
        report.expired.1
    );
}
