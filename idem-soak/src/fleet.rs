//! The example processes the soak runs: built once, started on free ports, killed and
//! started again, and the private PostgreSQL cluster they share.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

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
pub(crate) struct StartFailed {
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
    /// How many processes the fleet runs.
    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

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
    pub(crate) async fn launch(&self, index: usize) -> Result<(), StartFailed> {
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
    pub(crate) async fn kill(&self, index: usize) {
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
