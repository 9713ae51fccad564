//! What one run of one scenario measured.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::cpu::CpuTime;

/// Latencies in microseconds, from 1 µs to a minute, at three significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Counts and latencies of one scenario, merged over connections and rounds.
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    pub(crate) latency: Histogram<u64>,
    /// Wall time the requests took, summed over rounds.
    pub(crate) elapsed: Duration,
    /// Answers the scenario expects: executed, replayed, or (storm) 409.
    pub(crate) ok: u64,
    /// The handler ran (201 without `Idempotent-Replayed`).
    pub(crate) executed: u64,
    /// A stored answer came back (`Idempotent-Replayed: true`).
    pub(crate) replayed: u64,
    /// 409 in progress.
    pub(crate) conflicts: u64,
    /// 503: the database was busy (on SQLite, another request held the write lock past
    /// `claim_wait`); an answer the server is allowed to give, not counted as done.
    pub(crate) busy: u64,
    /// Anything the scenario does not expect, and transport failures.
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// Requests per second of each round, to show the spread.
    pub(crate) round_rates: Vec<f64>,
    /// CPU microseconds per request of each round, all parties together (`None`: that
    /// round answered nothing, or its CPU was not read).
    pub(crate) round_cpu: Vec<Option<f64>>,
    /// CPU time the run cost, summed over rounds.
    pub(crate) cpu: CpuTime,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            latency: histogram(),
            elapsed: Duration::ZERO,
            ok: 0,
            executed: 0,
            replayed: 0,
            conflicts: 0,
            busy: 0,
            errors: 0,
            first_error: None,
            round_rates: Vec::new(),
            round_cpu: Vec::new(),
            cpu: CpuTime::default(),
        }
    }
}

impl Stats {
    pub(crate) fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.latency.saturating_record(micros);
    }

    pub(crate) fn error(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    /// Adds the counts and latencies of work done at the same time (another connection).
    pub(crate) fn absorb(&mut self, other: &Stats) {
        self.latency
            .add(&other.latency)
            .expect("histograms with the same bounds");
        self.ok += other.ok;
        self.executed += other.executed;
        self.replayed += other.replayed;
        self.conflicts += other.conflicts;
        self.busy += other.busy;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    /// Adds a later round: its time adds up, its rate is kept for the spread.
    pub(crate) fn add_round(&mut self, round: &Stats) {
        self.absorb(round);
        self.elapsed += round.elapsed;
        self.cpu += round.cpu;
        self.round_rates.push(round.rate());
        self.round_cpu
            .push(round.cpu_per_request().map(|parts| parts.iter().sum()));
    }

    /// Answers per second (expected ones; errors do not count as throughput).
    pub(crate) fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    /// A latency quantile in milliseconds.
    pub(crate) fn ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// CPU microseconds per expected answer: server, PostgreSQL, load generator.
    pub(crate) fn cpu_per_request(&self) -> Option<[f64; 3]> {
        if self.ok == 0 || self.cpu.ours() == 0 {
            return None;
        }
        let per = |ns: u64| ns as f64 / self.ok as f64 / 1000.0;
        Some([
            per(self.cpu.server),
            per(self.cpu.postgres),
            per(self.cpu.client),
        ])
    }

    /// The server's context switches per expected answer.
    pub(crate) fn switches_per_request(&self) -> Option<f64> {
        (self.ok > 0).then(|| self.cpu.server_switches as f64 / self.ok as f64)
    }

    /// The share of the machine that processes outside the benchmark took meanwhile.
    pub(crate) fn others_share(&self, cores: usize) -> f64 {
        let wall = self.elapsed.as_nanos() as f64 * cores.max(1) as f64;
        if wall > 0.0 {
            self.cpu.others() as f64 / wall
        } else {
            0.0
        }
    }

    /// Smallest and largest per-round rate.
    pub(crate) fn rate_spread(&self) -> Option<(f64, f64)> {
        let min = self.round_rates.iter().copied().reduce(f64::min)?;
        let max = self.round_rates.iter().copied().reduce(f64::max)?;
        Some((min, max))
    }
}
