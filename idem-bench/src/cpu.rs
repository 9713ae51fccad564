//! CPU time per process, from `/proc/<pid>/task/*/schedstat` (nanoseconds on a CPU).
//!
//! On a two-core machine that other work shares, requests per second wobble with
//! whatever else runs; the CPU time a request costs the server, PostgreSQL and the load
//! generator does not. Where the machine is saturated, throughput is the cores divided
//! by that cost, so the CPU ratios are the steadier reading of the same question.

use std::fs;
use std::ops::{AddAssign, Sub};

use sqlx::PgPool;

/// CPU nanoseconds spent by each party, and by everything else on the machine.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuTime {
    pub(crate) server: u64,
    pub(crate) postgres: u64,
    pub(crate) client: u64,
    /// Busy time of the whole machine (`/proc/stat`), for what others took.
    pub(crate) machine: u64,
    /// Times a thread of the server left a CPU (voluntary or not): each hand-off between
    /// threads, such as a statement sent to sqlx's SQLite worker thread, costs some.
    pub(crate) server_switches: u64,
}

impl CpuTime {
    /// Busy time of processes that are not part of the benchmark.
    pub(crate) fn others(&self) -> u64 {
        self.machine
            .saturating_sub(self.server + self.postgres + self.client)
    }

    pub(crate) fn ours(&self) -> u64 {
        self.server + self.postgres + self.client
    }
}

impl Sub for CpuTime {
    type Output = CpuTime;

    fn sub(self, rhs: CpuTime) -> CpuTime {
        CpuTime {
            server: self.server.saturating_sub(rhs.server),
            postgres: self.postgres.saturating_sub(rhs.postgres),
            client: self.client.saturating_sub(rhs.client),
            machine: self.machine.saturating_sub(rhs.machine),
            server_switches: self.server_switches.saturating_sub(rhs.server_switches),
        }
    }
}

impl AddAssign for CpuTime {
    fn add_assign(&mut self, rhs: CpuTime) {
        self.server += rhs.server;
        self.postgres += rhs.postgres;
        self.client += rhs.client;
        self.machine += rhs.machine;
        self.server_switches += rhs.server_switches;
    }
}

/// Which processes to count.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    server: Option<u32>,
    postgres: Vec<u32>,
}

impl Probe {
    /// The server child and the PostgreSQL processes working for this database: its
    /// backends and the cluster's background processes (WAL writer, checkpointer, ...).
    /// Read again before each measurement, since pools open connections lazily.
    pub(crate) async fn new(server: Option<u32>, pool: &PgPool) -> Probe {
        let postgres: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
              WHERE datname = current_database() OR datname IS NULL",
        )
        .fetch_all(pool)
        .await
        .unwrap_or_default();
        Probe {
            server,
            postgres: postgres
                .into_iter()
                .filter_map(|p| p.try_into().ok())
                .collect(),
        }
    }

    /// The server child, the Redis server (in the database's column) and this process:
    /// the Redis rows, whose handlers use no PostgreSQL.
    pub(crate) fn with_redis(server: Option<u32>, redis: u32) -> Probe {
        Probe {
            server,
            postgres: vec![redis],
        }
    }

    /// The server child (if any) and this process alone: SQLite runs inside the server.
    pub(crate) fn without_database(server: Option<u32>) -> Probe {
        Probe {
            server,
            postgres: Vec::new(),
        }
    }

    pub(crate) fn sample(&self) -> CpuTime {
        CpuTime {
            server: self.server.map_or(0, process_ns),
            postgres: self.postgres.iter().map(|&pid| process_ns(pid)).sum(),
            client: process_ns(std::process::id()),
            machine: machine_busy_ns(),
            server_switches: self.server.map_or(0, context_switches),
        }
    }
}

/// CPU time of all threads of `pid` that are alive; 0 if it is gone.
fn process_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Context switches of all threads of `pid` that are alive; 0 if it is gone.
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter(|line| line.contains("ctxt_switches:"))
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Busy time of all CPUs since boot: everything but idle and iowait.
fn machine_busy_ns() -> u64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = stat.lines().next() else {
        return 0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|n| n.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user)
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy * (1_000_000_000 / clock_ticks())
}

/// USER_HZ: 100 on every Linux this runs on; /proc/stat counts in it.
fn clock_ticks() -> u64 {
    100
}
