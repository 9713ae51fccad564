//! `--callgrind N`: the server's instructions per request, scenario by scenario.
//!
//! Time on a shared two-core machine wobbles; instruction counts do not. The server runs
//! under valgrind's callgrind; before each scenario its counters are zeroed, after it
//! they are dumped (`callgrind_control`), so each profile holds that scenario's requests
//! alone. One connection, so the numbers are per request and not per batch of them.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use idem_testkit::TestDb;

use crate::child::Server;
use crate::db;
use crate::load::{self, HttpLoad, KeyLog, Mode};
use crate::options::Options;

pub(crate) async fn run(options: &Options, requests: u64) -> Result<(), String> {
    let db = TestDb::new().await;
    let pool = db::pool(&db, 2).await?;
    db::create_schema(&pool).await?;
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("cannot create {}: {e}", options.out.display()))?;
    let out_file = options.out.join("callgrind.out.%p");
    let wrapper = vec![
        "valgrind".to_owned(),
        "--tool=callgrind".to_owned(),
        format!("--callgrind-out-file={}", out_file.display()),
        // No instrumentation during start-up (slow, and not per request); switched on
        // with callgrind_control before the first scenario.
        "--instr-atstart=no".to_owned(),
    ];
    let server = Server::start(db.url(), 8, &wrapper, Duration::from_secs(300))?;
    let pid = server.pid();
    let idem = Arc::new(KeyLog::default());
    let hand = Arc::new(KeyLog::default());
    let loads = [
        ("bare", "/bare/orders", Mode::Fresh(None)),
        ("hand", "/hand/orders", Mode::Fresh(Some(Arc::clone(&hand)))),
        ("idem", "/idem/orders", Mode::Fresh(Some(Arc::clone(&idem)))),
        ("replay", "/idem/orders", Mode::Replay(Arc::clone(&idem))),
        (
            "hand-replay",
            "/hand/orders",
            Mode::Replay(Arc::clone(&hand)),
        ),
        ("phased", "/phased/orders", Mode::Fresh(None)),
    ];
    println!("server instructions per request (callgrind, {requests} requests, 1 connection)");
    for (name, path, mode) in loads {
        let load = HttpLoad { path, mode };
        // Warm up: first-use allocations and prepared statements are not per request.
        load::run_count(server.addr, &load, 1, 200.min(requests)).await?;
        control(pid, &["-i", "on"])?;
        control(pid, &["-z"])?;
        let stats = load::run_count(server.addr, &load, 1, requests).await?;
        control(pid, &["-d", name])?;
        control(pid, &["-i", "off"])?;
        if stats.errors > 0 {
            return Err(format!("{name}: {} errors under valgrind", stats.errors));
        }
        let instructions = dumped_instructions(&options.out, pid, name)?;
        println!(
            "  {name:<12} {:>10.0} instructions/request",
            instructions as f64 / stats.ok.max(1) as f64
        );
    }
    server.stop();
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
