//! The example processes and the faults injected into them and into the database.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::{PgCluster, StopMode};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// How long an example process may take to migrate and start listening.
const STARTUP: Duration = Duration::from_secs(30);
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
    pub(crate) async fn start(
        server: PathBuf,
        database_url: String,
        count: usize,
    ) -> Result<Self, String> {
        let mut instances = Vec::new();
        for _ in 0..count {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free port: {e}"))?
                .port();
            instances.push(Instance {
                addr: format!("127.0.0.1:{port}"),
                child: Mutex::new(None),
            });
        }
        let fleet = Self {
            server,
            database_url,
            instances,
        };
        for index in 0..count {
            fleet.launch(index).await?;
        }
        Ok(fleet)
    }

    /// `http://127.0.0.1:<port>` of every process.
    pub(crate) fn bases(&self) -> Vec<String> {
        self.instances
            .iter()
            .map(|i| format!("http://{}", i.addr))
            .collect()
    }

    /// Starts process `index` unless it runs, and waits until it serves.
    async fn launch(&self, index: usize) -> Result<(), String> {
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
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.server.display()))?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let expected = format!("orders: serving on http://{}", instance.addr);
        let served = tokio::time::timeout(STARTUP, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == expected {
                    return true;
                }
            }
            false
        })
        .await;
        if served != Ok(true) {
            let _ = child.kill().await;
            return Err(format!("the example on {} did not start", instance.addr));
        }
        // Keep reading, so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        *slot = Some(child);
        Ok(())
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
            self.launch(index).await?;
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
}

const CYCLE: [Fault; 6] = [
    Fault::Kill,
    Fault::Restart(StopMode::Fast),
    Fault::Kill,
    Fault::Restart(StopMode::Immediate),
    Fault::Kill,
    Fault::Outage,
];

/// Injects a fault every `every` until `deadline`; returns when each happened (since
/// `started`) and what it was.
pub(crate) async fn inject(
    fleet: Arc<Fleet>,
    cluster: Arc<PgCluster>,
    every: Duration,
    deadline: Instant,
    seed: u64,
    started: Instant,
) -> Vec<(Duration, String)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut injected = Vec::new();
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
        };
        injected.push((at, what));
    }
    injected
}

/// The faults by kind, for the report.
pub(crate) fn describe(injected: &[(Duration, String)]) -> String {
    let count = |prefix: &str| {
        injected
            .iter()
            .filter(|(_, f)| f.starts_with(prefix))
            .count()
    };
    format!(
        "{} in all: {} process kills (each started again), {} fast database restarts, {} \
         immediate (crash) database restarts, {} database outages of {} s",
        injected.len(),
        count("process kill"),
        count("database restart: Fast"),
        count("database restart: Immediate"),
        count("database outage"),
        OUTAGE.as_secs()
    )
}
