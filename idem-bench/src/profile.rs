//! `--callgrind N`: the server's instructions per request, scenario by scenario.
//!
//! Time on a shared two-core machine wobbles; instruction counts do not. The server runs
//! under valgrind's callgrind; before each scenario its counters are zeroed, after it
//! they are dumped (`callgrind_control`), so each profile holds that scenario's requests
//! alone. One connection, so the numbers are per request and not per batch of them.
//! PostgreSQL first, then SQLite (either left out with `--skip postgres` or `--skip sqlite`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use idem_testkit::{TestDb, TestSqlite};

use crate::child::Server;
use crate::db;
use crate::load::{self, HttpLoad, KeyLog, Mode};
use crate::options::Options;

pub(crate) async fn run(options: &Options, requests: u64) -> Result<(), String> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("cannot create {}: {e}", options.out.display()))?;
    let idem = Arc::new(KeyLog::default());
    let hand = Arc::new(KeyLog::default());
    if !options.skips_postgres() {
        let db = TestDb::new().await;
        let pool = db::pool(&db, 2).await?;
        db::create_schema(&pool).await?;
        let server = Server::start(db.url(), 8, &wrapper(options), Duration::from_secs(300))?;
        println!(
            "PostgreSQL: server instructions per request (callgrind, {requests} requests, 1 connection)"
        );
        let axum_idem = Arc::new(KeyLog::default());
        // The axum server (`server_axum.rs`) has the same paths on its own port.
        let loads = [
            ("bare", ACTIX, "/bare/orders", Mode::Fresh(None)),
            (
                "hand",
                ACTIX,
                "/hand/orders",
                Mode::Fresh(Some(Arc::clone(&hand))),
            ),
            (
                "idem",
                ACTIX,
                "/idem/orders",
                Mode::Fresh(Some(Arc::clone(&idem))),
            ),
            (
                "replay",
                ACTIX,
                "/idem/orders",
                Mode::Replay(Arc::clone(&idem)),
            ),
            (
                "hand-replay",
                ACTIX,
                "/hand/orders",
                Mode::Replay(Arc::clone(&hand)),
            ),
            ("phased", ACTIX, "/phased/orders", Mode::Fresh(None)),
            ("axum-bare", AXUM, "/bare/orders", Mode::Fresh(None)),
            ("axum-hand", AXUM, "/hand/orders", Mode::Fresh(None)),
            (
                "axum-idem",
                AXUM,
                "/idem/orders",
                Mode::Fresh(Some(Arc::clone(&axum_idem))),
            ),
            (
                "axum-replay",
                AXUM,
                "/idem/orders",
                Mode::Replay(Arc::clone(&axum_idem)),
            ),
        ];
        profile(options, &server, loads, requests, "").await?;
        server.stop();
    }
    if !options.skip_sqlite {
        // SQLite runs inside the server, so its instructions are counted with the server's.
        // NORMAL: the count does not depend on the disk, and the run is quicker.
        let db = TestSqlite::new();
        let pool = crate::sqlite::open(&db, "normal").await?;
        crate::sqlite::create_schema(&pool).await?;
        let server = Server::start_with_args(
            &db.url(),
            8,
            options.acquire_ping,
            &["--synchronous", "normal"],
            &wrapper(options),
            Duration::from_secs(300),
        )?;
        println!(
            "SQLite (synchronous=NORMAL): server instructions per request, SQLite's included \
             (callgrind, {requests} requests, 1 connection)"
        );
        let idem = Arc::new(KeyLog::default());
        let loads = [
            ("bare", ACTIX, "/bare/orders", Mode::Fresh(None)),
            ("hand", ACTIX, "/hand/orders", Mode::Fresh(None)),
            (
                "idem",
                ACTIX,
                "/idem/orders",
                Mode::Fresh(Some(Arc::clone(&idem))),
            ),
            (
                "replay",
                ACTIX,
                "/idem/orders",
                Mode::Replay(Arc::clone(&idem)),
            ),
        ];
        profile(options, &server, loads, requests, "sqlite-").await?;
        server.stop();
        pool.close().await;
    }
    Ok(())
}

/// The server under callgrind, with no instrumentation until the first scenario.
fn wrapper(options: &Options) -> Vec<String> {
    let out_file = options.out.join("callgrind.out.%p");
    vec![
        "valgrind".to_owned(),
        "--tool=callgrind".to_owned(),
        format!("--callgrind-out-file={}", out_file.display()),
        // No instrumentation during start-up (slow, and not per request); switched on
        // with callgrind_control before the first scenario.
        "--instr-atstart=no".to_owned(),
    ]
}

/// Which of the server's two listeners a load goes to.
const ACTIX: bool = false;
const AXUM: bool = true;

/// Each load once for warm-up, then `requests` of it counted; the dumps are named
/// `prefix` + the load's name.
async fn profile<const N: usize>(
    options: &Options,
    server: &Server,
    loads: [(&str, bool, &'static str, Mode); N],
    requests: u64,
    prefix: &str,
) -> Result<(), String> {
    let pid = server.pid();
    for (name, on_axum, path, mode) in loads {
        let addr = if on_axum { server.axum } else { server.addr };
        let load = HttpLoad { path, mode };
        let dump = format!("{prefix}{name}");
        // Warm up: first-use allocations and prepared statements are not per request.
        load::run_count(addr, &load, 1, 200.min(requests)).await?;
        control(pid, &["-i", "on"])?;
        control(pid, &["-z"])?;
        let stats = load::run_count(addr, &load, 1, requests).await?;
        control(pid, &["-d", &dump])?;
        control(pid, &["-i", "off"])?;
        if stats.errors > 0 {
            return Err(format!("{name}: {} errors under valgrind", stats.errors));
        }
        let instructions = dumped_instructions(&options.out, pid, &dump)?;
        println!(
            "  {name:<12} {:>10.0} instructions/request",
            instructions as f64 / stats.ok.max(1) as f64
        );
    }
    println!(
        "profiles: {}/callgrind.out.{pid}.* (callgrind_annotate <file> for the functions)",
        options.out.display()
    );
    Ok(())
}

fn control(pid: u32, args: &[&str]) -> Result<(), String> {
    let status = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run callgrind_control: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("callgrind_control {args:?} {pid} failed: {status}"))
    }
}

/// The total instruction count of the dump named `name`, from its `summary:` line.
fn dumped_instructions(dir: &Path, pid: u32, name: &str) -> Result<u64, String> {
    let prefix = format!("callgrind.out.{pid}.");
    let entries = std::fs::read_dir(dir).map_err(|e| e.to_string())?;
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if !file_name.starts_with(&prefix) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).map_err(|e| e.to_string())?;
        let is_ours = text
            .lines()
            .any(|line| line == format!("desc: Trigger: dump {name}"));
        if !is_ours {
            continue;
        }
        if let Some(total) = text.lines().find_map(|line| {
            line.strip_prefix("summary:")
                .or(line.strip_prefix("totals:"))
        }) {
            return total
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("no count in {file_name}"));
        }
    }
    Err(format!("no callgrind dump for {name} in {}", dir.display()))
}
