//! What a run measured, part by part: filled in by `run`, shown by `report`.

use std::time::Duration;

use crate::db::ServerInfo;
use crate::expiry::ExpiryResults;
use crate::floor::Breakdown;
use crate::options::Options;
use crate::scale::ScaleResults;
use crate::scenario::Scenario;
use crate::sqlite::SqliteResults;
use crate::stats::Stats;

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Results {
    pub(crate) options: Options,
    pub(crate) machine: Machine,
    /// `None` when every PostgreSQL part was left out.
    pub(crate) postgres: Option<PostgresResults>,
    /// `None` with `--skip sqlite`.
    pub(crate) sqlite: Option<SqliteResults>,
    pub(crate) took: Duration,
}

/// The parts measured on PostgreSQL.
#[derive(Debug)]
pub(crate) struct PostgresResults {
    pub(crate) database: ServerInfo,
    pub(crate) server_workers: usize,
    pub(crate) server_pool: u32,
    pub(crate) table: Vec<(Scenario, Stats)>,
    pub(crate) breakdown: Vec<Breakdown>,
    pub(crate) memory: Option<MemoryResults>,
    pub(crate) scale: Option<ScaleResults>,
    pub(crate) expiry: ExpiryResults,
}

/// Peak server memory per load.
#[derive(Debug)]
pub(crate) struct MemoryResults {
    pub(crate) idle_kib: u64,
    pub(crate) rows: Vec<(&'static str, Stats, u64)>,
    /// False where the kernel would not reset the peak between loads.
    pub(crate) reset_works: bool,
}

/// The machine, for the report.
#[derive(Debug)]
pub(crate) struct Machine {
    pub(crate) cpu: String,
    pub(crate) cores: usize,
    pub(crate) memory_gib: f64,
    pub(crate) kernel: String,
    pub(crate) rustc: String,
}

impl Machine {
    /// This machine, from `/proc` and `rustc --version`.
    pub(crate) fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|line| line.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let rustc = std::process::Command::new("rustc")
            .arg("--version")
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            kernel,
            rustc,
        }
    }
}
