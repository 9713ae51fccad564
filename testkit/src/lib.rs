//! Test support for idem: every integration test gets a real, empty PostgreSQL database,
//! and with [`TestSqlite`] a SQLite file of its own.
//!
//! [`TestDb::new`] creates a fresh database with a unique name and [`Drop`] removes it again.
//!
//! Where the databases live:
//!
//! * When the environment variable `DATABASE_URL` is set (and not empty), that server is
//!   used. The database named in the URL is only used to issue `CREATE DATABASE` and
//!   `DROP DATABASE`. An unreachable server is a test failure, never a skip.
//! * Otherwise one private, throwaway PostgreSQL cluster is started per test process, the
//!   first time a test asks for a database. It uses the server binaries found on `PATH` or
//!   under `/usr/lib/postgresql/<version>/bin`, runs with durability switched off, listens on
//!   a free port of 127.0.0.1 and is shut down and deleted when the test process exits, even
//!   when the process is killed: a small shell watchdog waits for the end of a pipe that only
//!   the test process holds open. Set `IDEM_TESTKIT_VERBOSE=1` to have the cluster's
//!   directory, port and start-up time printed on stderr.
//!
//! Fault tests that stop and restart the database use a [`PgCluster`] of their own instead.
//!
//! With `IDEM_TESTKIT_POOLER_URL` set as well (a connection pooler such as PgBouncer in
//! front of the `DATABASE_URL` server, forwarding every database name), [`TestDb::url`] and
//! [`TestDb::pool`] go through the pooler, with sqlx's statement cache off, while
//! [`TestDb::direct_url`] and [`TestDb::direct_pool`] still reach the server itself (for
//! what must not run through a transaction pooler, such as the application's own
//! migrations). `ha/pgbouncer.sh` sets both.

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod sqlite;
pub use sqlite::TestSqlite;

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, Executor};

mod cluster;
pub use cluster::{PgCluster, StopMode};

/// How long the private cluster may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long dropping a database may take before [`Drop`] gives up on it.
const DROP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long connecting to the server to create a database may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh empty database on a real PostgreSQL server; dropped (best effort) when the value is dropped.
///
/// The server is the one `DATABASE_URL` names, or else a private cluster that this test
/// process starts once and that disappears with it.
pub struct TestDb {
    /// Name of the database this value owns.
    name: String,
    /// URL of the database this value owns.
    url: String,
    /// URL of the maintenance database of the same server, used for `DROP DATABASE`.
    admin_url: String,
    /// URL of the database this value owns through `IDEM_TESTKIT_POOLER_URL`, when set.
    pooled_url: Option<String>,
}

impl fmt::Debug for TestDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDb")
            .field("name", &self.name)
            .field("url", &redact(&self.url))
            .field("pooled_url", &self.pooled_url.as_deref().map(redact))
            .finish()
    }
}

impl TestDb {
    /// Creates a fresh database. Panics with a clear, actionable message when no PostgreSQL can be had.
    ///
    /// With `DATABASE_URL` set, the database is created on that server; otherwise on the
    /// private cluster of this test process, which is started on first use.
    pub async fn new() -> TestDb {
        let (admin_url, private) = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => (url.trim().to_owned(), false),
            _ => (Cluster::get().admin_url.clone(), true),
        };

        let mut conn = connect_admin(&admin_url).await;
        // On the private cluster (fsync=off), copying the template's files is faster than
        // WAL-logging them (PostgreSQL 15's default; about 1.3x here); on a shared server
        // with fsync on, the checkpoints of FILE_COPY make it much slower: default there.
        let mut strategy = "";
        if private {
            let version: Result<String, _> =
                sqlx::query_scalar("SELECT current_setting('server_version_num')")
                    .fetch_one(&mut conn)
                    .await;
            if version.is_ok_and(|v| v.parse::<u32>().is_ok_and(|v| v >= 150_000)) {
                strategy = " STRATEGY FILE_COPY";
            }
        }
        let name = loop {
            let name = unique_db_name();
            // The name is made of [a-z0-9_] only, so quoting it is enough.
            let sql = format!("CREATE DATABASE \"{name}\"{strategy}");
            match conn.execute(AssertSqlSafe(sql)).await {
                Ok(_) => break name,
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {
                    // duplicate_database: a leftover with the same name; take the next one.
                    continue;
                }
                Err(e) => panic!(
                    "idem-testkit: CREATE DATABASE {name} failed on {}: {e}",
                    redact(&admin_url)
                ),
            }
        };
        let _ = conn.close().await;

        let url = with_database(&admin_url, &name);
        let pooled_url = match std::env::var("IDEM_TESTKIT_POOLER_URL") {
            // A transaction pooler hands each transaction a server connection of its own:
            // statements sqlx prepared and cached on one are not there on the next.
            Ok(pooler) if !pooler.trim().is_empty() => Some(with_param(
                &with_database(pooler.trim(), &name),
                "statement-cache-capacity=0",
            )),
            _ => None,
        };
        TestDb {
            name,
            url,
            admin_url,
            pooled_url,
        }
    }

    /// Connection URL of the fresh database (postgres://...), usable by child processes too.
    ///
    /// Through the pooler when `IDEM_TESTKIT_POOLER_URL` is set.
    pub fn url(&self) -> &str {
        self.pooled_url.as_deref().unwrap_or(&self.url)
    }

    /// Connection URL of the fresh database on the server itself, never through a pooler.
    pub fn direct_url(&self) -> &str {
        &self.url
    }

    /// Whether [`url`](Self::url) and [`pool`](Self::pool) go through a pooler
    /// (`IDEM_TESTKIT_POOLER_URL`).
    pub fn is_pooled(&self) -> bool {
        self.pooled_url.is_some()
    }

    /// A new pool (sqlx::PgPool) to this database with `max_connections` connections.
    ///
    /// Through the pooler when `IDEM_TESTKIT_POOLER_URL` is set. The pool is bound to the
    /// tokio runtime it is used on; make one per runtime. Panics when the database cannot
    /// be reached.
    pub async fn pool(&self, max_connections: u32) -> PgPool {
        connect_pool(self.url(), max_connections).await
    }

    /// Like [`pool`](Self::pool), but to the server itself, never through a pooler.
    pub async fn direct_pool(&self, max_connections: u32) -> PgPool {
        connect_pool(&self.url, max_connections).await
    }
}

async fn connect_pool(url: &str, max_connections: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "idem-testkit: cannot connect to test database {}: {e}",
                redact(url)
            )
        })
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop cannot be async and may run inside (or outside) any runtime: do the work on a
        // thread with its own runtime, and never wait for it longer than DROP_TIMEOUT.
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let (tx, rx) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("idem-testkit-drop".into())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async {
                        let work = async {
                            let mut conn = PgConnection::connect(&admin_url).await?;
                            conn.execute(AssertSqlSafe(sql)).await?;
                            conn.close().await
                        };
                        let _ = tokio::time::timeout(DROP_TIMEOUT, work).await;
                    });
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(DROP_TIMEOUT + Duration::from_secs(5));
        }
    }
}

/// Connects to the maintenance database, panicking with the (redacted) URL on failure.
async fn connect_admin(admin_url: &str) -> PgConnection {
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(admin_url)).await;
    match attempt {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => panic!(
            "idem-testkit: cannot connect to PostgreSQL at {} (from DATABASE_URL, or the private \
             test cluster when it is unset): {e}. Start that server, fix DATABASE_URL, or unset it \
             to let the tests start a private cluster.",
            redact(admin_url)
        ),
        Err(_) => panic!(
            "idem-testkit: connecting to PostgreSQL at {} timed out after {:?}",
            redact(admin_url),
            CONNECT_TIMEOUT
        ),
    }
}

/// A database name unique to this process and, with high probability, to all processes.
fn unique_db_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: OnceLock<u32> = OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS; mix in the clock for good measure.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos_since_epoch());
        h.finish() as u32
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("idem_test_{}_{n}_{salt:08x}", std::process::id())
}

fn nanos_since_epoch() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Splits a `postgres://` URL into (scheme and authority, path, query-with-`?`).
fn split_url(url: &str) -> (&str, &str, &str) {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (before_query, query) = match url[after_scheme..].find('?') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    };
    match before_query[after_scheme..].find('/') {
        Some(i) => {
            let (base, path) = before_query.split_at(after_scheme + i);
            (base, path, query)
        }
        None => (before_query, "", query),
    }
}

/// The same URL with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, _, query) = split_url(url);
    // Keep every query parameter except a `dbname=` that would override the path.
    let params: Vec<&str> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("dbname="))
        .collect();
    if params.is_empty() {
        format!("{base}/{database}")
    } else {
        format!("{base}/{database}?{}", params.join("&"))
    }
}

/// The URL with the query parameter `param` (`name=value`) added.
fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

/// The URL with its password (if any) replaced by `***`, for messages.
fn redact(url: &str) -> String {
    let (base, path, query) = split_url(url);
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let authority = &base[after_scheme..];
    let base = match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &base[..after_scheme],
                &authority[..colon],
                &authority[at..]
            ),
            None => base.to_owned(),
        },
        None => base.to_owned(),
    };
    let query: Vec<String> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            if p.starts_with("password=") {
                "password=***".to_owned()
            } else {
                p.to_owned()
            }
        })
        .collect();
    if query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{}", query.join("&"))
    }
}

// ---------------------------------------------------------------------------------------------
// The private cluster
// ---------------------------------------------------------------------------------------------

/// The private cluster of this process. Lives in a static and is never dropped: the end of the
/// process closes `_lifeline`, which tells the watchdog to stop the server and delete `dir`.
struct Cluster {
    admin_url: String,
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
    fn get() -> &'static Cluster {
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

/// Runs `initdb` for a new data directory `data` (trust auth, superuser `postgres`, UTF-8,
/// C locale); shared by the private cluster and [`PgCluster`].
fn init_data_dir(bin: &Path, as_postgres: bool, data: &Path) -> Result<(), String> {
    let mut initdb = server_command(as_postgres, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(data)
        .args([
            "--auth=trust",
            "--no-sync",
            "-U",
            "postgres",
            "--encoding=UTF8",
            "--locale=C",
        ])
        .stdin(Stdio::null());
    let out = initdb
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.join("initdb").display()))?;
    if !out.status.success() {
        let hint = if as_postgres {
            "\n(running as root, the server runs as the `postgres` OS user, which must be able \
             to reach the temp dir; set TMPDIR to a directory it can reach if it cannot)"
        } else {
            ""
        };
        return Err(format!(
            "initdb failed ({}):\n{}{}{hint}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
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

/// True when the postmaster reports itself ready and its port takes TCP connections.
fn server_ready(data: &Path, port: u16) -> bool {
    let Ok(pid_file) = fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    // Line 8 of postmaster.pid is the server status (PostgreSQL 10 and later).
    let status_ready = match pid_file.lines().nth(7) {
        Some(status) => status.trim() == "ready",
        None => false,
    };
    status_ready
        && TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(1))
            .is_ok()
}

/// Last lines of the server log, for panic messages.
fn log_tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(log) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(30);
    if lines.is_empty() {
        "(empty)".to_owned()
    } else {
        lines[start..].join("\n")
    }
}

/// A command that runs `program`, as the `postgres` OS user when we are root.
fn server_command(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// A free TCP port on 127.0.0.1 (free at the time of asking).
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free TCP port on 127.0.0.1: {e}"))
}

/// A new private directory under the system temp dir.
fn make_temp_dir() -> Result<PathBuf, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = nanos_since_epoch() % 1_000_000_000;
        let dir = base.join(format!(
            "idem-testkit-{}-{n}-{nanos:09}",
            std::process::id()
        ));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create a directory in {} (set TMPDIR to a writable one): {e}",
                    base.display()
                ));
            }
        }
    }
    Err(format!(
        "cannot create a fresh directory in {}",
        base.display()
    ))
}

/// Whether this process runs with effective user id 0, read from /proc (or `id -u`).
fn euid_is_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(ids) = line.strip_prefix("Uid:") {
                // real, effective, saved, filesystem
                if let Some(euid) = ids.split_whitespace().nth(1) {
                    return euid == "0";
                }
            }
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Uid and gid of the `postgres` OS user, which the server runs as when we are root.
fn postgres_user_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(uid), Some(gid)) => Ok((uid, gid)),
        _ => Err(
            "running as root, and PostgreSQL refuses to run as root, but there is no \
                  `postgres` OS user to run it as. Create one (installing the Debian postgresql \
                  package does), run the tests as a non-root user, or set DATABASE_URL to a \
                  server"
                .to_owned(),
        ),
    }
}

/// The directory holding `initdb` and `postgres`: from PATH, else the highest
/// /usr/lib/postgresql/<version>/bin.
fn find_server_binaries() -> Option<PathBuf> {
    let has_both =
        |dir: &Path| is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"));
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<(Vec<u64>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version: Vec<u64> = name
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            with_database("postgres://h/db?sslmode=disable&dbname=y", "x"),
            "postgres://h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql:///db?host=/tmp", "x"),
            "postgresql:///x?host=/tmp"
        );
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://h/db?password=secret&sslmode=disable"),
            "postgres://h/db?password=***&sslmode=disable"
        );
    }

    #[test]
    fn names_are_unique_and_valid() {
        let a = unique_db_name();
        let b = unique_db_name();
        assert_ne!(a, b);
        assert!(a.len() < 63);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        );
    }
}
