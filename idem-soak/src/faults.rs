//! The example processes and the faults injected into them and into the database, and the
//! jumps in time: keys moved past their retention, followed by an expiry sweep.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::{PgCluster, StopMode};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// How long an example process may take to migrate and start listening before the soak gives
/// up on it: generous, since a busy 2-core machine can take many seconds.
const STARTUP: Duration = Duration::from_secs(180);
/// How many ports a first start tries before it gives up.
const PORT_ATTEMPTS: usize = 3;
/// How many of its last stderr lines a failed start reports.
const STDERR_LINES: usize = 20;
/// How long the database stays down in an outage.
const OUTAGE: Duration = Duration::from_secs(2);

/// Builds the example with cargo and returns the executable's path.
pub(crate) fn build_example() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = std::process::Command::new(cargo);
    command
        .args([
            "build",
            "-p",
            "idem",
            "--example",
            "orders",
            "--message-format=json",
        ])
        .current_dir(&root)
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo to build the example: {e}"))?;
    if !output.status.success() {
        return Err("cargo build --example orders failed".to_owned());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "orders")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo did not report the example's executable".to_owned())
}

/// A port that was free a moment ago, as `127.0.0.1:<port>`.
fn free_addr() -> Result<String, String> {
    Ok(format!("127.0.0.1:{}", idem_testkit::free_port()?))
}

/// Why an example process did not start.
#[derive(Debug)]
struct StartFailed {
    message: String,
    /// Its port was taken: a first start can try another.
    port_taken: bool,
}

impl std::fmt::Display for StartFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One example process, on a port it keeps across restarts.
#[derive(Debug)]
struct Instance {
    addr: String,
    child: Mutex<Option<Child>>,
}

/// The example processes, all on one database.
#[derive(Debug)]
pub(crate) struct Fleet {
    server: PathBuf,
    database_url: String,
    instances: Vec<Instance>,
}

impl Fleet {
    /// Starts `count` processes, one after the other (the first applies the migrations).
    ///
    /// A port is found free by binding it and letting it go, so another process (an outgoing
    /// connection's ephemeral port, say) can take it before the example binds it; such a start
    /// moves to a fresh port, which is safe only here, before any client knows the address.
    pub(crate) async fn start(
        server: PathBuf,
        database_url: String,
        count: usize,
    ) -> Result<Self, String> {
        let mut fleet = Self {
            server,
            database_url,
            instances: Vec::new(),
        };
        for _ in 0..count {
            fleet.start_another(free_addr).await?;
        }
        Ok(fleet)
    }

    /// Starts one more process on the first address from `addrs` that is not taken.
    async fn start_another(
        &mut self,
        mut addrs: impl FnMut() -> Result<String, String>,
    ) -> Result<(), String> {
        let index = self.instances.len();
        self.instances.push(Instance {
            addr: addrs()?,
            child: Mutex::new(None),
        });
        let mut attempt = 1;
        loop {
            match self.launch(index).await {
                Ok(()) => return Ok(()),
                Err(failed) if failed.port_taken && attempt < PORT_ATTEMPTS => {
                    attempt += 1;
                    self.instances[index].addr = addrs()?;
                }
                Err(failed) => return Err(failed.message),
            }
        }
    }

    /// `http://127.0.0.1:<port>` of every process.
    pub(crate) fn bases(&self) -> Vec<String> {
        self.instances
            .iter()
            .map(|i| format!("http://{}", i.addr))
            .collect()
    }

    /// Starts process `index` unless it runs, and waits until it serves.
    async fn launch(&self, index: usize) -> Result<(), StartFailed> {
        let instance = &self.instances[index];
        let mut slot = instance.child.lock().await;
        if let Some(child) = slot.as_mut()
            && matches!(child.try_wait(), Ok(None))
        {
            return Ok(());
        }
        let mut child = Command::new(&self.server)
            .env("DATABASE_URL", &self.database_url)
            .env("BIND_ADDR", &instance.addr)
            .env_remove("IDEM_EXAMPLE_CRASH_AFTER")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| StartFailed {
                message: format!("cannot run {}: {e}", self.server.display()),
                port_taken: false,
            })?;
        // Both pipes are read for the process's whole life, so it never blocks on a full one;
        // stderr's last lines are kept to say why a start failed.
        let stderr = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let stderr = tokio::spawn(async move {
            let mut stderr = stderr;
            let mut tail = VecDeque::with_capacity(STDERR_LINES);
            while let Ok(Some(line)) = stderr.next_line().await {
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            tail
        });
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let expected = format!("orders: serving on http://{}", instance.addr);
        // Waits for the line or for stdout to end (the process exited); the bound only keeps a
        // hung start from hanging the soak, it is no measure of how fast a start should be.
        let served = tokio::time::timeout(STARTUP, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == expected {
                    return true;
                }
            }
            false
        })
        .await;
        if served == Ok(true) {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            *slot = Some(child);
            return Ok(());
        }
        let _ = child.kill().await;
        let status = child
            .wait()
            .await
            .map_or_else(|e| format!("status unknown: {e}"), |s| s.to_string());
        let tail = stderr.await.unwrap_or_default();
        let port_taken = tail.iter().any(|l| l.contains("Address already in use"));
        let why = match served {
            Err(_) => format!("no \"{expected}\" within {} s", STARTUP.as_secs()),
            Ok(_) => format!("it exited ({status})"),
        };
        let stderr = Vec::from(tail).join("\n");
        Err(StartFailed {
            message: format!(
                "the example on {} did not start: {why}; its stderr ended with:\n{stderr}",
                instance.addr
            ),
            port_taken,
        })
    }

    /// SIGKILL to process `index`: no cleanup, like a crashed host.
    async fn kill(&self, index: usize) {
        if let Some(mut child) = self.instances[index].child.lock().await.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts every process that is not running.
    pub(crate) async fn ensure_all_up(&self) -> Result<(), String> {
        for index in 0..self.instances.len() {
            self.launch(index)
                .await
                .map_err(|failed| failed.to_string())?;
        }
        Ok(())
    }

    pub(crate) async fn stop_all(&self) {
        for index in 0..self.instances.len() {
            self.kill(index).await;
        }
    }
}

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
                let index = rng.usize(..fleet.instances.len());
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
                let killed = kill_first.then(|| rng.usize(..fleet.instances.len()));
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

#[cfg(test)]
mod tests {
    use idem_testkit::TestSqlite;

    use super::*;

    /// A fleet of no processes yet, of the real example on `db`.
    fn empty_fleet(db: &TestSqlite) -> Fleet {
        Fleet {
            server: build_example().expect("the example builds"),
            database_url: db.url(),
            instances: Vec::new(),
        }
    }

    /// A port held for as long as the listener lives, and its address: the port another
    /// process took between the check and the example's bind.
    fn held_port() -> (std::net::TcpListener, String) {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let addr = held.local_addr().expect("its address").to_string();
        (held, addr)
    }

    #[test]
    fn a_first_start_on_a_port_taken_in_the_meantime_moves_to_another() {
        let db = TestSqlite::new();
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let (_held, taken_addr) = held_port();
        let mut fleet = empty_fleet(&db);
        let mut first = Some(taken_addr.clone());
        runtime
            .block_on(fleet.start_another(|| first.take().map_or_else(free_addr, Ok)))
            .expect("the second port serves");
        let addr = fleet.instances[0].addr.clone();
        assert_ne!(addr, taken_addr);
        let served = runtime.block_on(async {
            reqwest::get(format!("http://{addr}/health"))
                .await
                .map(|r| r.status())
        });
        assert_eq!(
            served.ok(),
            Some(reqwest::StatusCode::OK),
            "the moved instance answers"
        );
        runtime.block_on(fleet.stop_all());
    }

    #[test]
    fn a_restart_on_a_taken_port_fails_and_says_why() {
        let db = TestSqlite::new();
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let (_held, addr) = held_port();
        let mut fleet = empty_fleet(&db);
        fleet.instances.push(Instance {
            addr: addr.clone(),
            child: Mutex::new(None),
        });
        // A restart keeps its port (clients know it), so it reports instead of moving.
        let failed = runtime
            .block_on(fleet.launch(0))
            .expect_err("the port is taken");
        assert!(failed.port_taken, "{failed}");
        assert!(
            failed.message.contains(&format!("cannot listen on {addr}")),
            "the example's own words reach the report: {failed}"
        );
        assert!(failed.message.contains("it exited"), "{failed}");
    }
}
