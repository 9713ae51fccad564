//! The faults injected into the example processes and into the database, and the jumps
//! in time: keys moved past their retention, followed by an expiry sweep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::{PgCluster, StopMode};

use crate::fleet::Fleet;

/// How long the database stays down in an outage.
const OUTAGE: Duration = Duration::from_secs(2);

/// The faults, injected in this order, over and over.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill,
    Restart(StopMode),
    Outage,
    /// A retention jump and a sweep; with `kill_first`, while a process is dead (killed
    /// just before, started again after the sweep), so the jump catches the requests it
    /// was running in progress, as when a host stays down past the retention.
    Jump {
        kill_first: bool,
    },
}

/// A jump comes second, so even a short run (the smoke test) has one.
const CYCLE: [Fault; 8] = [
    Fault::Kill,
    Fault::Jump { kill_first: true },
    Fault::Restart(StopMode::Fast),
    Fault::Kill,
    Fault::Restart(StopMode::Immediate),
    Fault::Jump { kill_first: false },
    Fault::Kill,
    Fault::Outage,
];

/// One in this many jumps moves every key past its retention; the others a random share.
const JUMP_ALL_EVERY: usize = 4;
/// The share of the keys in progress a jump also takes the lease from, as if their
/// process had stalled that long: a retry may take over while the attempt still runs.
const LEASE_END_SHARE: f64 = 0.5;

/// Moves a share of the completed keys (all when `share` is 1) and every key in progress
/// past its retention, and ends the lease of some of those in progress, in one statement;
/// returns each key with the state it was caught in. Keys in progress are few at any
/// moment and they are what a jump can break, so none is left out. `created_at` tells two
/// lives of a single-transaction key apart (its generation stays 0); `generation` those
/// of a phased key.
const JUMP: &str = "\
UPDATE idem_keys
   SET expires_at = now() - interval '1 second',
       locked_until = CASE WHEN state = 'started' AND random() < $2
                           THEN now() - interval '1 second' ELSE locked_until END
 WHERE state = 'started' OR $1 >= 1.0 OR random() < $1
RETURNING scope, idem_key, state = 'completed', generation,
          (extract(epoch FROM created_at) * 1000000)::bigint,
          state = 'started' AND locked_until = now() - interval '1 second'";

/// A key as a retention jump caught it.
#[derive(Debug, Clone)]
pub(crate) struct Caught {
    pub(crate) scope: String,
    pub(crate) key: String,
    /// Completed (its reuse may start a new operation once swept or reclaimed), or still
    /// in progress (it must be resumed, never started again).
    pub(crate) completed: bool,
    pub(crate) generation: i64,
    /// Microseconds since the epoch.
    pub(crate) created_at: i64,
    /// The jump also ended its lease.
    pub(crate) lease_ended: bool,
}

/// One retention jump and the sweep after it.
#[derive(Debug, Clone)]
pub(crate) struct Jump {
    /// Since the start of the run.
    pub(crate) at: Duration,
    /// The share of the keys it aimed at, from 0 to 1.
    pub(crate) share: f64,
    /// The keys it caught; empty when the statement failed.
    pub(crate) caught: Vec<Caught>,
    /// Rows deleted and batches, or why the jump or its sweep failed.
    pub(crate) sweep: Result<(u64, u64), String>,
}

impl Jump {
    pub(crate) fn completed(&self) -> usize {
        self.caught.iter().filter(|c| c.completed).count()
    }

    pub(crate) fn started(&self) -> usize {
        self.caught.len() - self.completed()
    }

    pub(crate) fn leases_ended(&self) -> usize {
        self.caught.iter().filter(|c| c.lease_ended).count()
    }

    fn describe(&self) -> String {
        let sweep = match &self.sweep {
            Ok((rows, batches)) => format!("the sweep deleted {rows} rows in {batches} batches"),
            Err(error) => format!("FAILED: {error}"),
        };
        format!(
            "retention jump: {} keys ({:.0} % of the completed ones; {} completed, {} in \
             progress, {} leases ended); {sweep}",
            self.caught.len(),
            self.share * 100.0,
            self.completed(),
            self.started(),
            self.leases_ended()
        )
    }
}

/// What the injector did: every fault with its time (since the start) and description,
/// and the jumps in detail for the checker.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    pub(crate) faults: Vec<(Duration, String)>,
    pub(crate) jumps: Vec<Jump>,
}

/// The jump, then one sweep from here with the runtime's own expiry code (the example's
/// processes sweep on their own schedule too).
async fn jump(pool: &sqlx::PgPool, share: f64, at: Duration) -> Jump {
    type Row = (String, String, bool, i64, i64, bool);
    let caught: Result<Vec<Row>, _> = sqlx::query_as(JUMP)
        .bind(share)
        .bind(LEASE_END_SHARE)
        .fetch_all(pool)
        .await;
    let caught = match caught {
        Ok(rows) => rows,
        Err(error) => {
            return Jump {
                at,
                share,
                caught: Vec::new(),
                sweep: Err(format!("the jump failed: {error}")),
            };
        }
    };
    let sweep = idem_runtime::admin::Expiry::new(pool.clone())
        .sweep_once()
        .await
        .map(|report| (report.rows_deleted, report.batches))
        .map_err(|error| format!("the sweep failed: {error}"));
    Jump {
        at,
        share,
        caught: caught
            .into_iter()
            .map(
                |(scope, key, completed, generation, created_at, lease_ended)| Caught {
                    scope,
                    key,
                    completed,
                    generation,
                    created_at,
                    lease_ended,
                },
            )
            .collect(),
        sweep,
    }
}

/// Injects a fault every `every` until `deadline`; returns when each happened (since
/// `started`) and what it was.
pub(crate) async fn inject(
    fleet: Arc<Fleet>,
    cluster: Arc<PgCluster>,
    every: Duration,
    deadline: Instant,
    seed: u64,
    started: Instant,
) -> Injected {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut injected = Injected::default();
    // Lazy: it connects at the first jump, and again after each restart.
    let pool = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy(&cluster.url())
    {
        Ok(pool) => pool,
        Err(error) => {
            injected.faults.push((
                Duration::ZERO,
                format!("no jumps: bad database URL: {error}"),
            ));
            return injected;
        }
    };
    let mut jumps = 0;
    for fault in CYCLE.iter().cycle() {
        tokio::time::sleep(every).await;
        if Instant::now() >= deadline {
            break;
        }
        let at = started.elapsed();
        let what = match *fault {
            Fault::Kill => {
                let index = rng.usize(..fleet.len());
                fleet.kill(index).await;
                let down = Duration::from_millis(rng.u64(200..1500));
                tokio::time::sleep(down).await;
                let restarted = fleet.launch(index).await;
                format!(
                    "process kill: SIGKILL to instance {index}, started again after {} ms{}",
                    down.as_millis(),
                    restarted
                        .err()
                        .map(|e| format!(" (FAILED: {e})"))
                        .unwrap_or_default()
                )
            }
            Fault::Restart(mode) => {
                let cluster = Arc::clone(&cluster);
                let _ = tokio::task::spawn_blocking(move || cluster.restart(mode)).await;
                format!("database restart: {mode:?}")
            }
            Fault::Outage => {
                let cluster = Arc::clone(&cluster);
                let _ = tokio::task::spawn_blocking(move || {
                    cluster.stop(StopMode::Fast);
                    std::thread::sleep(OUTAGE);
                    cluster.resume();
                })
                .await;
                format!("database outage: stopped for {} s", OUTAGE.as_secs())
            }
            Fault::Jump { kill_first } => {
                jumps += 1;
                let share = if jumps % JUMP_ALL_EVERY == 0 {
                    1.0
                } else {
                    0.05 + 0.3 * rng.f64()
                };
                let killed = kill_first.then(|| rng.usize(..fleet.len()));
                if let Some(index) = killed {
                    fleet.kill(index).await;
                }
                let jump = jump(&pool, share, at).await;
                let mut what = jump.describe();
                if let Some(index) = killed {
                    let restarted = fleet.launch(index).await;
                    what = format!(
                        "{what}; instance {index} killed before it and started again after{}",
                        restarted
                            .err()
                            .map(|e| format!(" (FAILED: {e})"))
                            .unwrap_or_default()
                    );
                }
                injected.jumps.push(jump);
                what
            }
        };
        injected.faults.push((at, what));
    }
    pool.close().await;
    injected
}

impl Injected {
    /// The faults by kind, and the jumps' totals, for the report.
    pub(crate) fn describe(&self) -> String {
        let count = |prefix: &str| {
            self.faults
                .iter()
                .filter(|(_, f)| f.starts_with(prefix))
                .count()
        };
        let sum = |f: fn(&Jump) -> usize| self.jumps.iter().map(f).sum::<usize>();
        let swept = self
            .jumps
            .iter()
            .filter_map(|j| j.sweep.as_ref().ok())
            .fold((0, 0), |(n, rows), (deleted, _)| (n + 1, rows + deleted));
        format!(
            "{} in all: {} process kills (each started again), {} fast database restarts, {} \
             immediate (crash) database restarts, {} database outages of {} s, {} retention \
             jumps (keys caught: {} completed, {} in progress, {} leases ended), each followed \
             by a sweep ({} sweeps ran, {} rows deleted)",
            self.faults.len(),
            count("process kill"),
            count("database restart: Fast"),
            count("database restart: Immediate"),
            count("database outage"),
            OUTAGE.as_secs(),
            self.jumps.len(),
            sum(Jump::completed),
            sum(Jump::started),
            sum(Jump::leases_ended),
            swept.0,
            swept.1
        )
    }
}
