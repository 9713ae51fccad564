//! A private PostgreSQL cluster that a test can stop and start again, for fault tests.
//!
//! The cluster behind [`TestDb`](crate::TestDb) lives as long as the test process and is
//! never interrupted. [`PgCluster`] is one a test owns: it starts it, stops it (cleanly or
//! as in a crash), starts it again on the same port and data directory, and drops it.
//! It always runs from the installed server binaries, whether `DATABASE_URL` is set or
//! not: a shared server cannot be restarted by a test.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use crate::ports::free_port;
use crate::server::{
    STARTUP_TIMEOUT, euid_is_root, find_server_binaries, init_data_dir, log_tail, make_temp_dir,
    postgres_user_ids, server_command, server_ready,
};

/// How long a stopping server may take before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Removes the cluster when the process that owns it is gone, even if that process was
/// killed: waits for EOF on stdin, then stops whatever server the data directory's
/// `postmaster.pid` names and removes the directory. Arguments: $1 = cluster dir,
/// $2 = data dir.
const JANITOR: &str = r#"
trap '' INT TERM HUP QUIT
read -r _line || :
if [ -s "$2/postmaster.pid" ]; then
  pm=$(head -n 1 "$2/postmaster.pid")
  kill -INT "$pm" 2>/dev/null
  i=0
  while kill -0 "$pm" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pm" 2>/dev/null
fi
rm -rf "$1"
"#;

/// How [`PgCluster::stop`] stops the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// SIGINT, PostgreSQL's "fast" shutdown: open transactions are rolled back, clients
    /// are disconnected and a checkpoint is written, as an operator's restart does.
    Fast,
    /// SIGQUIT, the "immediate" shutdown: every process exits at once without a
    /// checkpoint, and the next start runs crash recovery from the WAL, as after a power
    /// cut of the database host.
    Immediate,
}

/// A private PostgreSQL cluster a test can stop and start again; removed when dropped.
///
/// It listens on 127.0.0.1 on a port chosen at the first start and kept across restarts,
/// with trust authentication for the superuser `postgres`. `fsync` is off (the machine
/// does not crash during a test) but `synchronous_commit` stays on: a commit that a
/// client saw succeed is in the WAL and survives [`StopMode::Immediate`].
///
/// The methods block (a start takes about a second); from async code call them through
/// `tokio::task::spawn_blocking` with the cluster in an `Arc`.
///
/// ```no_run
/// use idem_testkit::{PgCluster, StopMode};
///
/// let cluster = PgCluster::start();
/// let url = cluster.url(); // postgres://postgres@127.0.0.1:<port>/postgres
/// cluster.stop(StopMode::Immediate);
/// assert!(!cluster.is_running());
/// cluster.resume();
/// assert_eq!(cluster.url(), url);
/// ```
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    as_postgres: bool,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    /// The running server process (the `runuser` wrapper when we are root); `None` while
    /// stopped.
    server: Mutex<Option<Child>>,
    /// Closed when this value is dropped or the process ends: the janitor then cleans up.
    _lifeline: ChildStdin,
}

impl PgCluster {
    /// Creates a new cluster in a temporary directory and starts it. Panics with the reason
    /// (no server binaries, initdb failed, the server did not come up) when it cannot.
    pub fn start() -> PgCluster {
        match Self::try_start() {
            Ok(cluster) => cluster,
            Err(e) => panic!("idem-testkit: cannot start a PostgreSQL cluster: {e}"),
        }
    }

    fn try_start() -> Result<PgCluster, String> {
        let bin = find_server_binaries().ok_or(
            "PostgreSQL server binaries not found: install them (Debian/Ubuntu: apt-get \
             install postgresql); fault tests need a server they can stop and start, so \
             DATABASE_URL does not replace them",
        )?;
        let owner = if euid_is_root() {
            Some(postgres_user_ids()?)
        } else {
            None
        };
        let dir = make_temp_dir()?;
        let data = dir.join("data");
        let log = dir.join("server.log");
        let cleanup = |e: String| {
            let _ = fs::remove_dir_all(&dir);
            e
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| cleanup(format!("cannot chown {} to postgres: {e}", dir.display())))?;
        }
        init_data_dir(&bin, owner.is_some(), &data).map_err(cleanup)?;
        let janitor = Command::new("sh")
            .arg("-c")
            .arg(JANITOR)
            .arg("idem-testkit-janitor")
            .arg(&dir)
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let mut janitor = janitor.map_err(|e| cleanup(format!("cannot start sh: {e}")))?;
        let lifeline = janitor.stdin.take().expect("piped stdin");
        let mut cluster = PgCluster {
            bin,
            as_postgres: owner.is_some(),
            dir,
            data,
            log,
            port: 0,
            server: Mutex::new(None),
            _lifeline: lifeline,
        };
        // The port is free when asked for and taken by the server a moment later; should
        // another process take it in between, the server exits and another port is tried.
        let mut last_error = String::new();
        for _ in 0..3 {
            cluster.port = free_port()?;
            match cluster.launch() {
                Ok(()) => return Ok(cluster),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`, the same before and after restarts.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// The URL of database `database` on this cluster.
    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The TCP port the cluster listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server is running (started and not stopped since).
    pub fn is_running(&self) -> bool {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        match server.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server and waits until it has exited. Does nothing when it is stopped.
    /// Panics when the server does not stop within a minute (it is killed then).
    pub fn stop(&self, mode: StopMode) {
        if let Err(e) = self.try_stop(mode) {
            panic!("idem-testkit: {e}");
        }
    }

    fn try_stop(&self, mode: StopMode) -> Result<(), String> {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut child) = server.take() else {
            return Ok(());
        };
        let signal = match mode {
            StopMode::Fast => "-INT",
            StopMode::Immediate => "-QUIT",
        };
        // The postmaster's pid, not the child's: as root the child is `runuser`.
        let pid = fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next().map(str::trim).map(str::to_owned));
        match pid {
            Some(pid) => {
                let _ = Command::new("kill").args([signal, &pid]).status();
            }
            None => {
                let _ = child.kill();
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the server did not stop within {STOP_TIMEOUT:?}; log tail:\n{}",
                    log_tail(&self.log)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts the stopped server again on the same port and data directory and waits until
    /// it accepts connections (after crash recovery, following [`StopMode::Immediate`]).
    /// Does nothing when it is running.
    pub fn resume(&self) {
        if self.is_running() {
            return;
        }
        if let Err(e) = self.launch() {
            panic!("idem-testkit: cannot start the cluster again: {e}");
        }
    }

    /// [`stop`](Self::stop) then [`resume`](Self::resume).
    pub fn restart(&self, mode: StopMode) {
        self.stop(mode);
        self.resume();
    }

    /// Starts the server and waits until it is ready; on failure nothing is left running.
    fn launch(&self) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        let mut command = server_command(self.as_postgres, &self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(&self.data)
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args([
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Own process group: a Ctrl-C meant for the test does not stop the server
            // under it; the janitor stops it when the test process is gone.
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.bin.join("postgres").display()))?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "postgres exited with {status} while starting on port {}; log tail:\n{}",
                    self.port,
                    log_tail(&self.log)
                ));
            }
            if server_ready(&self.data, self.port) {
                *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the server did not accept connections on 127.0.0.1:{} within \
                     {STARTUP_TIMEOUT:?}; log tail:\n{}",
                    self.port,
                    log_tail(&self.log)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The cluster's directory (data directory, socket and `server.log`), for messages.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Stopped here so the port is free when drop returns; closing the lifeline then
        // lets the janitor remove the directory. No panic in drop: it may run while a
        // failing test unwinds.
        let _ = self.try_stop(StopMode::Fast);
    }
}
