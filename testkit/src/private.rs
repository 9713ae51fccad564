//! The private cluster behind `TestDb` when `DATABASE_URL` is unset:
//! started once per test process, on first use, and stopped and deleted by a shell
//! watchdog when the process is gone, however it ended.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use crate::ports::free_port;
use crate::server::{
    STARTUP_TIMEOUT, euid_is_root, find_server_binaries, init_data_dir, log_tail, make_temp_dir,
    postgres_user_ids, server_ready,
};

/// The private cluster of this process. Lives in a static and is never dropped: the end of the
/// process closes `_lifeline`, which tells the watchdog to stop the server and delete `dir`.
pub(crate) struct Cluster {
    pub(crate) admin_url: String,
    _lifeline: ChildStdin,
}

/// Shell watchdog. Arguments: $1 = cluster dir, $2 = data dir, $3 = log file, then the server
/// command line. Starts the server, waits for EOF on stdin (the test process exited), then
/// stops the server (SIGINT: fast shutdown; SIGKILL after 20 s) and removes the directory.
/// Prints `exited <status>` on stdout when the server exits by itself.
const WATCHDOG: &str = r#"
dir=$1; data=$2; log=$3; shift 3
trap '' INT TERM HUP QUIT
( "$@" </dev/null >>"$log" 2>&1; st=$?; : >"$dir/exited"; echo "exited $st" ) &
read -r _line || :
i=0; pm=
while [ ! -e "$dir/exited" ] && [ $i -lt 300 ]; do
  if [ -s "$data/postmaster.pid" ]; then pm=$(head -n 1 "$data/postmaster.pid"); break; fi
  sleep 0.1; i=$((i+1))
done
if [ -n "$pm" ]; then
  kill -INT "$pm" 2>/dev/null
  i=0
  while [ ! -e "$dir/exited" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pm" 2>/dev/null
fi
wait
rm -rf "$dir"
"#;

impl Cluster {
    /// The cluster, started on first call. Blocking (about a second, once), independent of any
    /// async runtime; the same for every runtime and thread of the process. A failure to start
    /// is remembered, so that every test fails at once with the same message.
    pub(crate) fn get() -> &'static Cluster {
        static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
        match CLUSTER.get_or_init(Cluster::start) {
            Ok(cluster) => cluster,
            Err(e) => panic!("idem-testkit: no private PostgreSQL cluster: {e}"),
        }
    }

    fn start() -> Result<Cluster, String> {
        let bin = find_server_binaries().ok_or(
            "PostgreSQL server binaries not found: install them (Debian/Ubuntu: apt-get \
             install postgresql) or set DATABASE_URL to a server",
        )?;
        let owner = if euid_is_root() {
            Some(postgres_user_ids()?)
        } else {
            None
        };

        // The port is taken from the OS and released just before the server binds it; in the
        // rare case another process takes it in between, the server exits and we try again.
        let mut last_error = String::new();
        for _attempt in 0..3 {
            match start_once(&bin, owner) {
                Ok(cluster) => return Ok(cluster),
                Err(Failure::Retry(e)) => last_error = e,
                Err(Failure::Fatal(e)) => return Err(e),
            }
        }
        Err(last_error)
    }
}

/// Why a start attempt failed.
enum Failure {
    /// The server exited while starting (e.g. its port was taken): worth another try.
    Retry(String),
    /// Anything else.
    Fatal(String),
}

/// One attempt: a new directory, initdb, the server under its watchdog, and the wait until
/// it accepts connections. On failure nothing is left behind.
fn start_once(bin: &Path, owner: Option<(u32, u32)>) -> Result<Cluster, Failure> {
    let started = Instant::now();
    let as_postgres = owner.is_some();
    let dir = make_temp_dir().map_err(Failure::Fatal)?;
    let data = dir.join("data");
    let log = dir.join("server.log");
    let fail = |msg: String| {
        let _ = fs::remove_dir_all(&dir);
        Failure::Fatal(msg)
    };
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| fail(format!("cannot chown {} to postgres: {e}", dir.display())))?;
    }

    init_data_dir(bin, as_postgres, &data).map_err(fail)?;
    let initdb_time = started.elapsed();

    let port = free_port().map_err(fail)?;
    // From here on the watchdog owns the directory and removes it when told to stop.
    let lifeline = launch(bin, as_postgres, &dir, &data, &log, port)?;
    if std::env::var_os("IDEM_TESTKIT_VERBOSE").is_some() {
        eprintln!(
            "idem-testkit: private cluster in {} on port {port}: initdb {initdb_time:?}, \
             ready after {:?}",
            dir.display(),
            started.elapsed()
        );
    }
    Ok(Cluster {
        admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        _lifeline: lifeline,
    })
}

/// Starts the server under the watchdog and waits until it accepts connections. On failure
/// the watchdog is told to stop (its stdin is closed), so it stops the server and removes `dir`.
fn launch(
    bin: &Path,
    as_postgres: bool,
    dir: &Path,
    data: &Path,
    log: &Path,
    port: u16,
) -> Result<ChildStdin, Failure> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(WATCHDOG)
        .arg("idem-testkit-watchdog")
        .arg(dir)
        .arg(data)
        .arg(log);
    if as_postgres {
        cmd.args(["runuser", "-u", "postgres", "--"]);
    }
    cmd.arg(bin.join("postgres"))
        .arg("-D")
        .arg(data)
        .arg("-k")
        .arg(dir)
        .args(["-c", "listen_addresses=127.0.0.1", "-p"])
        .arg(port.to_string())
        .args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Own process group: a Ctrl-C on the terminal goes to the test process only; the
        // watchdog cleans up when that process is gone.
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = fs::remove_dir_all(dir);
            return Err(Failure::Fatal(format!(
                "cannot start the watchdog shell (sh): {e}"
            )));
        }
    };
    let lifeline = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");

    // Reports when the server exits by itself (e.g. it could not bind the port).
    let (exit_tx, exit_rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if exit_tx.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(status) = exit_rx.try_recv() {
            let tail = log_tail(log);
            drop(lifeline);
            let _ = child.wait();
            return Err(Failure::Retry(format!(
                "postgres {status} while starting; server log:\n{tail}"
            )));
        }
        if server_ready(data, port) {
            // The watchdog is not waited for: it outlives this process by design.
            drop(child);
            return Ok(lifeline);
        }
        if Instant::now() >= deadline {
            let tail = log_tail(log);
            drop(lifeline);
            let _ = child.wait();
            return Err(Failure::Fatal(format!(
                "the server did not accept connections on 127.0.0.1:{port} within \
                 {STARTUP_TIMEOUT:?}; server log tail:\n{tail}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
