//! What the cluster asks of the machine: the installed programs and the `postgres` OS
//! user, a health endpoint's status, a server's pid and a log's tail.
//! Nothing here knows the cluster's layout; `cluster.rs` puts these together.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The status code of `GET http://127.0.0.1:<port>/<path>`, with a short timeout; `None`
/// when nothing answers. A blocking HTTP/1.0 request by hand: Patroni's and etcd's
/// health endpoints need nothing more, and the fault driver runs on a plain thread.
pub(crate) fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let addr = (Ipv4Addr::LOCALHOST, port).into();
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    // Patroni answers slowly while its PostgreSQL starts; a poller that hangs up first
    // only adds a traceback to its log.
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    // Read to the end (HTTP/1.0: the server closes): closing early makes Patroni log a
    // reset connection.
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    std::str::from_utf8(response.get(9..12)?).ok()?.parse().ok()
}

pub(crate) fn postmaster_pid(data: &Path) -> Option<String> {
    let text = fs::read_to_string(data.join("postmaster.pid")).ok()?;
    text.lines().next().map(|l| l.trim().to_owned())
}

/// The last lines of a component's log, for a failure message. Patroni's REST API prints
/// a Python traceback whenever a poller gives up on an answer (a slow node under load);
/// those lines are left out, because a handful of tracebacks fill the tail and hide the
/// lines that say why PostgreSQL or Patroni failed. Everything else (Patroni's and
/// PostgreSQL's lines with their tab-indented continuations, etcd's JSON, HAProxy's
/// notices) is kept.
pub(crate) fn tail(path: &Path) -> String {
    tail_of(&fs::read_to_string(path).unwrap_or_default())
}

fn tail_of(text: &str) -> String {
    let (dropped, kept): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| is_traceback(l));
    let mut out = kept[kept.len().saturating_sub(40)..].join("\n");
    if !dropped.is_empty() {
        out.push_str(&format!(
            "\n({} line(s) of Python tracebacks left out)",
            dropped.len()
        ));
    }
    out
}

/// Whether `line` belongs to a Python traceback as Python's socketserver prints one: the
/// banner, the frames and source lines (indented by spaces), the separators, and the
/// exception's own line.
fn is_traceback(line: &str) -> bool {
    let exception = line
        .split_once(':')
        .map_or(line, |(name, _)| name)
        .trim_end();
    line.trim().is_empty()
        || line.starts_with(' ')
        || line.starts_with("Traceback (most recent call last)")
        || line.starts_with("Exception occurred during processing of request")
        || line.chars().all(|c| c == '-')
        || (!exception.contains(' ')
            && (exception.ends_with("Error") || exception.ends_with("Exception")))
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The newest `/usr/lib/postgresql/<version>/bin` with a server and pg_rewind.
pub(crate) fn postgres_bin() -> Result<PathBuf, String> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL server binaries not found under /usr/lib/postgresql".to_owned())?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "PostgreSQL server binaries not found under /usr/lib/postgresql".into())
}

/// uid and gid of the `postgres` OS user: PostgreSQL (and so Patroni) refuses to run as
/// root.
pub(crate) fn postgres_ids() -> Result<(u32, u32), String> {
    let passwd = fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0] == "postgres")
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .ok_or_else(|| {
            "no `postgres` OS user (Debian's postgresql package creates it): PostgreSQL \
             does not run as root"
                .into()
        })
}

/// Whether this process runs as root (its effective uid, from /proc).
pub(crate) fn euid_is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

pub(crate) fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), String> {
    if !euid_is_root() {
        return Ok(());
    }
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("cannot chown {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What CI's failure message showed (stop 35): a traceback around the lines that
    /// matter. The tracebacks go; Patroni's, PostgreSQL's (with its tab-indented
    /// continuation), etcd's and HAProxy's lines stay, in order.
    #[test]
    fn a_tail_keeps_every_line_but_the_tracebacks() {
        let log = "\
----------------------------------------
Exception occurred during processing of request from ('127.0.0.1', 41234)
Traceback (most recent call last):
  File \"/usr/lib/python3.11/socketserver.py\", line 834, in write
    self._sock.sendall(b)
BrokenPipeError: [Errno 32] Broken pipe

2026-12-04 19:30:36,775 INFO: Lock owner: pg1; I am pg2
2026-12-04 19:30:36.800 UTC [30490] FATAL:  could not create any TCP/IP sockets
\t\tIs another postmaster already running?
{\"level\":\"warn\",\"msg\":\"slow fdatasync\"}
[WARNING]  (1234) : Server postgres/pg2 is DOWN
ConnectionResetError: [Errno 104] Connection reset by peer
----------------------------------------
";
        assert_eq!(
            tail_of(log),
            "\
2026-12-04 19:30:36,775 INFO: Lock owner: pg1; I am pg2
2026-12-04 19:30:36.800 UTC [30490] FATAL:  could not create any TCP/IP sockets
\t\tIs another postmaster already running?
{\"level\":\"warn\",\"msg\":\"slow fdatasync\"}
[WARNING]  (1234) : Server postgres/pg2 is DOWN
(9 line(s) of Python tracebacks left out)"
        );
    }

    /// Only the last 40 lines are kept, and a log without tracebacks says nothing more.
    #[test]
    fn a_tail_is_the_last_forty_lines() {
        let log: String = (1..=100)
            .map(|i| format!("2026-12-04 line {i}\n"))
            .collect();
        let tail = tail_of(&log);
        assert_eq!(tail.lines().count(), 40);
        assert_eq!(tail.lines().next(), Some("2026-12-04 line 61"));
        assert_eq!(tail.lines().last(), Some("2026-12-04 line 100"));
    }
}
