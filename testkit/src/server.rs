//! The installed PostgreSQL server and what running it takes: finding its binaries, the
//! `postgres` OS user when we are root, `initdb`, a private directory, and
//! telling when a server is ready. Shared by the process's private cluster and
//! `PgCluster`; knows neither.

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::names::nanos_since_epoch;

/// How long the private cluster may take to accept connections.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `initdb` for a new data directory `data` (trust auth, superuser `postgres`, UTF-8,
/// C locale); shared by the private cluster and `PgCluster`.
pub(crate) fn init_data_dir(bin: &Path, as_postgres: bool, data: &Path) -> Result<(), String> {
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

/// True when the postmaster reports itself ready and its port takes TCP connections.
pub(crate) fn server_ready(data: &Path, port: u16) -> bool {
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
pub(crate) fn log_tail(log: &Path) -> String {
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
pub(crate) fn server_command(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// A new private directory under the system temp dir.
pub(crate) fn make_temp_dir() -> Result<PathBuf, String> {
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
pub(crate) fn euid_is_root() -> bool {
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
pub(crate) fn postgres_user_ids() -> Result<(u32, u32), String> {
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
pub(crate) fn find_server_binaries() -> Option<PathBuf> {
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
