//! The table, the ratios against the targets, `BENCHMARKS.md` and the chart.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use plotters::prelude::*;

use crate::expiry::Live;
use crate::load::{STORM_DUPLICATES, Scenario};
use crate::results::{PostgresResults, Results};
use crate::sqlite::{SCENARIOS as SQLITE_SCENARIOS, SqliteResults, SqliteRun};
use crate::stats::Stats;

/// The part of `BENCHMARKS.md` a run writes, and its chart beside it. A run on a server
/// without durability (the private cluster) and one on a durable server (`DATABASE_URL`)
/// each have their own, so both readings can stand side by side; what is outside the
/// markers (notes written by people) survives every run.
struct Section {
    begin: &'static str,
    end: &'static str,
    chart: &'static str,
}

const FAST: Section = Section {
    begin: "<!-- idem-bench: generated from here (PostgreSQL without fsync) -->",
    end: "<!-- idem-bench: generated up to here (PostgreSQL without fsync) -->",
    chart: "benchmarks.svg",
};

const DURABLE: Section = Section {
    begin: "<!-- idem-bench: generated from here (durable PostgreSQL) -->",
    end: "<!-- idem-bench: generated up to here (durable PostgreSQL) -->",
    chart: "benchmarks-durable.svg",
};

/// The SQLite part has a section of its own, and no chart.
const SQLITE: Section = Section {
    begin: "<!-- idem-bench: generated from here (SQLite) -->",
    end: "<!-- idem-bench: generated up to here (SQLite) -->",
    chart: "",
};

fn section(pg: &PostgresResults) -> &'static Section {
    if pg.database.durable() {
        &DURABLE
    } else {
        &FAST
    }
}

/// A target of the issue and how this run did.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) what: &'static str,
    pub(crate) value: Option<f64>,
    pub(crate) target: String,
    pub(crate) pass: Option<bool>,
}

impl Check {
    fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        }
    }
}

fn stats(table: &[(Scenario, Stats)], scenario: Scenario) -> Option<&Stats> {
    table
        .iter()
        .find(|(s, _)| *s == scenario)
        .map(|(_, stats)| stats)
}

fn rate_ratio(table: &[(Scenario, Stats)], a: Scenario, b: Scenario) -> Option<f64> {
    let (a, b) = (stats(table, a)?, stats(table, b)?);
    (b.rate() > 0.0).then(|| a.rate() / b.rate())
}

/// The throughput ratio a saturated machine would show: the inverse ratio of the CPU
/// time one request costs, all parties together.
fn cpu_ratio(table: &[(Scenario, Stats)], a: Scenario, b: Scenario) -> Option<f64> {
    let total = |s: Scenario| -> Option<f64> {
        let [server, pg, client] = stats(table, s)?.cpu_per_request()?;
        Some(server + pg + client)
    };
    let (a, b) = (total(a)?, total(b)?);
    (a > 0.0).then(|| b / a)
}

/// The targets, in its order.
fn checks(pg: &PostgresResults) -> Vec<Check> {
    let at_least = |what, value: Option<f64>, min: Option<f64>, target: String| Check {
        what,
        value,
        target,
        pass: value.zip(min).map(|(v, min)| v >= min),
    };
    let floor = rate_ratio(&pg.table, Scenario::FloorProtocol, Scenario::FloorBare);
    let cpu_floor = cpu_ratio(&pg.table, Scenario::FloorProtocol, Scenario::FloorBare);
    let mut checks = vec![
        at_least(
            "idem/hand throughput",
            rate_ratio(&pg.table, Scenario::Idem, Scenario::Hand),
            Some(0.97),
            ">= 0.97".to_owned(),
        ),
        at_least(
            "idem/bare throughput",
            rate_ratio(&pg.table, Scenario::Idem, Scenario::Bare),
            floor,
            match floor {
                Some(floor) => format!(">= floor(protocol)/floor(bare) = {floor:.3}"),
                None => ">= floor(protocol)/floor(bare) (not measured)".to_owned(),
            },
        ),
        at_least(
            "replay/idem throughput",
            rate_ratio(&pg.table, Scenario::Replay, Scenario::Idem),
            Some(2.0),
            match rate_ratio(&pg.table, Scenario::FloorReplay, Scenario::FloorProtocol) {
                Some(floor) => format!(">= 2.0 (floor(replay)/floor(protocol) = {floor:.3})"),
                None => ">= 2.0".to_owned(),
            },
        ),
        at_least(
            "idem/hand, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Idem, Scenario::Hand),
            Some(0.97),
            ">= 0.97".to_owned(),
        ),
        at_least(
            "idem/bare, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Idem, Scenario::Bare),
            cpu_floor,
            match cpu_floor {
                Some(floor) => format!(">= the same for the floor = {floor:.3}"),
                None => ">= the same for the floor (not measured)".to_owned(),
            },
        ),
        at_least(
            "replay/idem, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Replay, Scenario::Idem),
            Some(2.0),
            ">= 2.0".to_owned(),
        ),
    ];
    let claim = pg
        .scale
        .as_ref()
        .map(|scale| scale.big.claim_new.ms(0.99) / scale.small.claim_new.ms(0.99).max(0.001));
    checks.push(Check {
        what: "claim p99, big table / small table",
        value: claim,
        target: "<= 1.5".to_owned(),
        pass: claim.map(|ratio| ratio <= 1.5),
    });
    let expiry = &pg.expiry;
    let sweep = expiry
        .idem
        .zip(expiry.plain)
        .map(|(idem, plain)| idem.rate() / plain.rate().max(1e-9));
    checks.push(at_least(
        "expiry full speed, idem/plain SQL",
        sweep,
        Some(0.8),
        ">= 0.8".to_owned(),
    ));
    let half: fn(&Live) -> &(Stats, Stats) = |live| &live.half;
    let saturated: fn(&Live) -> &(Stats, Stats) = |live| &live.saturated;
    for (what, pair) in [
        ("live p99 during a sweep / without, half load", half),
        ("live p99 during a sweep / without, saturated", saturated),
    ] {
        let ratio = expiry.live.as_ref().map(|live| {
            let (quiet, sweeping) = pair(live);
            sweeping.ms(0.99) / quiet.ms(0.99).max(0.001)
        });
        checks.push(Check {
            what,
            value: ratio,
            target: "<= 1.5".to_owned(),
            pass: ratio.map(|ratio| ratio <= 1.5),
        });
    }
    checks
}

fn row(scenario: Scenario, stats: &Stats) -> String {
    let spread = stats
        .rate_spread()
        .map_or(String::new(), |(min, max)| format!("{min:.0}–{max:.0}"));
    let mut notes = String::new();
    if scenario == Scenario::Storm {
        let answers = stats.ok + stats.errors;
        let keys = answers / STORM_DUPLICATES as u64;
        let _ = write!(
            notes,
            "{keys} keys × {STORM_DUPLICATES}: {} executed, {} replayed, {} × 409",
            stats.executed, stats.replayed, stats.conflicts
        );
        if stats.executed > keys {
            notes.push_str(" — MORE EXECUTIONS THAN KEYS");
        }
    }
    if stats.busy > 0 {
        let _ = write!(notes, " {} × 503", stats.busy);
    }
    if let Some(error) = &stats.first_error {
        let _ = write!(notes, " first error: {error}");
    }
    let cpu = stats
        .cpu_per_request()
        .map_or("—".to_owned(), |[server, pg, client]| {
            format!(
                "{:.0} = {server:.0} + {pg:.0} + {client:.0}",
                server + pg + client
            )
        });
    format!(
        "| {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {cpu} | {} | {} |",
        scenario.name(),
        stats.rate(),
        spread,
        stats.ms(0.5),
        stats.ms(0.99),
        stats.ms(0.999),
        stats.errors,
        notes.trim()
    )
}

/// The generated Markdown of the PostgreSQL parts: the machine, the command, every table
/// and the ratios.
fn markdown(results: &Results, pg: &PostgresResults) -> String {
    let o = &results.options;
    let m = &results.machine;
    let db = &pg.database;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Latest run, {}{}\n",
        if db.durable() {
            "durable PostgreSQL"
        } else {
            "PostgreSQL without fsync"
        },
        if o.quick {
            " (quick: smaller tables, shorter runs; not the numbers to quote)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "- Machine: {} × {} ({:.0} GiB RAM), Linux {}, {}",
        m.cores, m.cpu, m.memory_gib, m.kernel, m.rustc
    );
    let _ = writeln!(md, "- Database: {}", db.summary());
    if !db.durable() {
        let _ = writeln!(
            md,
            "- **Durability is off** on this server (fsync or synchronous_commit): commits \
             cost no disk flush, so absolute rates are higher than on a production server \
             and the per-statement costs weigh more in the ratios. Run with \
             `DATABASE_URL` set to a durable server for the other picture."
        );
    }
    let _ = writeln!(
        md,
        "- Command: `{}` ({} measured rounds of {} s per scenario, order rotated each round, \
         after a warm-up; {} connections; server: {} actix workers, pool of {}{}); took {:.0} s",
        o.command,
        o.rounds,
        o.seconds.as_secs(),
        o.connections,
        pg.server_workers,
        pg.server_pool,
        if o.acquire_ping {
            ", sqlx's ping before each acquire"
        } else {
            ", no ping before each acquire (the README's advice)"
        },
        results.took.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- Server, PostgreSQL and load generator share the machine's {} cores.\n",
        m.cores
    );

    let _ = writeln!(md, "### Scenarios\n");
    let _ = writeln!(
        md,
        "| scenario | req/s | per round | p50 ms | p99 ms | p99.9 ms | CPU µs/req = server + \
         PostgreSQL + client | errors | notes |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (scenario, stats) in &pg.table {
        let _ = writeln!(md, "{}", row(*scenario, stats));
    }
    let others: f64 = {
        let (busy, wall): (u64, f64) = pg.table.iter().fold((0, 0.0), |(b, w), (_, s)| {
            (
                b + s.cpu.others(),
                w + s.elapsed.as_nanos() as f64 * m.cores as f64,
            )
        });
        if wall > 0.0 { busy as f64 / wall } else { 0.0 }
    };
    let _ = writeln!(
        md,
        "\nCPU per request is measured from `/proc/<pid>/task/*/schedstat` of the server, \
         the PostgreSQL processes of the database and this process (the HTTP client, or the \
         SQL client for the floor). Processes outside the benchmark took {:.0}% of the \
         machine while the scenarios ran{}.\n",
        others * 100.0,
        if others > 0.1 {
            ": throughput is disturbed by that; CPU per request much less so"
        } else {
            ""
        }
    );
    for (scenario, _) in &pg.table {
        let _ = writeln!(md, "- `{}`: {}", scenario.name(), scenario.describe());
    }
    let _ = writeln!(
        md,
        "\n![throughput and p99 per scenario]({})\n",
        section(pg).chart
    );

    let _ = writeln!(md, "### Ratios against the targets\n");
    let _ = writeln!(md, "| ratio | this run | target | |");
    let _ = writeln!(md, "|---|---:|---|---|");
    for check in checks(pg) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            check.what,
            check.value.map_or("—".to_owned(), |v| format!("{v:.3}")),
            check.target,
            check.verdict()
        );
    }
    if let Some(floor) = rate_ratio(&pg.table, Scenario::FloorProtocol, Scenario::FloorBare) {
        let _ = writeln!(
            md,
            "\nidem/bare over HTTP is {} beside floor(protocol)/floor(bare) = {floor:.3}, \
             the database's own cost of the protocol's statements.",
            rate_ratio(&pg.table, Scenario::Idem, Scenario::Bare)
                .map_or("—".to_owned(), |v| format!("{v:.3}"))
        );
    }

    if !pg.breakdown.is_empty() {
        let _ = writeln!(
            md,
            "\n### Where the time goes: each round trip on one connection (p50 µs)\n"
        );
        let mut header = "| round trip |".to_owned();
        let mut rule = "|---|".to_owned();
        for b in &pg.breakdown {
            let _ = write!(header, " {:?} |", b.floor);
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{header}\n{rule}");
        for name in crate::floor::STEPS {
            let mut line = format!("| {name} |");
            for b in &pg.breakdown {
                match b.steps.iter().find(|(n, _)| *n == name) {
                    Some((_, stats)) => {
                        let _ = write!(line, " {:.0} |", stats.ms(0.5) * 1000.0);
                    }
                    None => line.push_str(" |"),
                }
            }
            let _ = writeln!(md, "{line}");
        }
        let mut line = "| **whole operation** |".to_owned();
        for b in &pg.breakdown {
            let _ = write!(line, " **{:.0}** |", b.total.ms(0.5) * 1000.0);
        }
        let _ = writeln!(md, "{line}");
        let mut line = "| operations/s on one connection |".to_owned();
        for b in &pg.breakdown {
            let _ = write!(line, " {:.0} |", b.total.rate());
        }
        let _ = writeln!(md, "{line}");
    }

    if let Some(scale) = &pg.scale {
        let _ = writeln!(
            md,
            "\n### Scale: the claim with a small and a big key table\n"
        );
        let _ = writeln!(
            md,
            "| keys in the table | claim (new key) p50 / p99 ms | claim (existing key) p50 / \
             p99 ms | idem over HTTP req/s, p50 / p99 ms | preload s |"
        );
        let _ = writeln!(md, "|---:|---:|---:|---:|---:|");
        for point in [&scale.small, &scale.big] {
            let _ = writeln!(
                md,
                "| {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.0}, {:.2} / {:.2} | {:.0} |",
                point.keys,
                point.claim_new.ms(0.5),
                point.claim_new.ms(0.99),
                point.claim_existing.ms(0.5),
                point.claim_existing.ms(0.99),
                point.http.rate(),
                point.http.ms(0.5),
                point.http.ms(0.99),
                point.preload_secs
            );
        }
        let _ = writeln!(
            md,
            "\nThe claim is timed alone, inside idem's transaction (BEGIN, claim, completion, \
             COMMIT; ROLLBACK for an existing key), at {} connections; the table grows by \
             the keys claimed while measuring.",
            o.connections
        );
    }

    if let Some(memory) = &pg.memory {
        let _ = writeln!(md, "\n### Peak server memory (VmHWM)\n");
        let _ = writeln!(md, "| load | peak MiB | req/s | p99 ms | errors |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|");
        let _ = writeln!(
            md,
            "| idle, after the scenarios (VmRSS) | {:.1} | | | |",
            memory.idle_kib as f64 / 1024.0
        );
        for (name, stats, peak) in &memory.rows {
            let _ = writeln!(
                md,
                "| {name} | {:.1} | {:.0} | {:.2} | {} |",
                *peak as f64 / 1024.0,
                stats.rate(),
                stats.ms(0.99),
                stats.errors
            );
        }
        let _ = writeln!(
            md,
            "\n{} s per load at {} connections.{}",
            o.seconds.as_secs(),
            o.connections,
            if memory.reset_works {
                " The peak is reset (`/proc/<pid>/clear_refs`) before each load."
            } else {
                " The kernel refused to reset the peak, so each value is the peak so far."
            }
        );
    }

    let _ = writeln!(md, "\n### Expiry\n");
    let expiry = &pg.expiry;
    if let Some(plain) = expiry.plain {
        let _ = writeln!(
            md,
            "| sweeping {} expired keys, twice each | rows/s | batches | s |",
            expiry.expired_keys
        );
        let _ = writeln!(md, "|---|---:|---:|---:|");
        let _ = writeln!(
            md,
            "| plain SQL, batched DELETE by primary key | {:.0} | {} | {:.1} |",
            plain.rate(),
            plain.batches,
            plain.secs
        );
        if let Some(idem) = expiry.idem {
            let _ = writeln!(
                md,
                "| idem's expiry task (`Expiry::sweep_once`, no pause) | {:.0} | {} | {:.1} |",
                idem.rate(),
                idem.batches,
                idem.secs
            );
        }
        let _ = writeln!(
            md,
            "\nBoth run the same batch (1000 rows chosen through the `expires_at` index, \
             `FOR UPDATE SKIP LOCKED`, deleted by primary key) on fresh copies of the same \
             expired keys, in the order plain, idem, idem, plain."
        );
    }
    if let Some(live) = &expiry.live {
        let _ = writeln!(
            md,
            "\n| live `idem` load, {} connections | req/s | p50 ms | p99 ms | p99.9 ms |",
            o.connections
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|");
        let during = if o.sweep_pace.is_some() {
            "during a sweep at the pace below"
        } else {
            "during a sweep at the default pace"
        };
        let half = format!("at half that rate ({:.0}/s)", live.rate);
        for (load, (quiet, sweeping)) in [
            ("as fast as it goes", &live.saturated),
            (half.as_str(), &live.half),
        ] {
            for (name, stats) in [("no sweep", quiet), (during, sweeping)] {
                let _ = writeln!(
                    md,
                    "| {load}, {name} | {:.0} | {:.2} | {:.2} | {:.2} |",
                    stats.rate(),
                    stats.ms(0.5),
                    stats.ms(0.99),
                    stats.ms(0.999)
                );
            }
        }
        let _ = writeln!(
            md,
            "\nTwo rounds each, alternating; the task (`Expiry::new(pool){}.spawn()`: \
             batches of {}, {} ms apart) deleted {} expired keys while the loads ran. As \
             fast as it goes, the closed loop leaves no CPU idle, so any background work \
             shows in its tail; at half the rate (an open loop: requests are sent on a \
             schedule and latency counts from the time each was due) there is room, as \
             on a server that is not saturated.",
            match o.sweep_pace {
                Some((rows, pause)) => format!(
                    ".batch_size({rows}).pause(Duration::from_millis({}))",
                    pause.as_millis()
                ),
                None => String::new(),
            },
            o.sweep_pace
                .map_or(idem::Expiry::DEFAULT_BATCH_SIZE, |(rows, _)| rows),
            o.sweep_pace
                .map_or(idem::Expiry::DEFAULT_PAUSE, |(_, pause)| pause)
                .as_millis(),
            live.rows_during
        );
    }
    if !expiry.note.is_empty() {
        let _ = writeln!(md, "\n{}", expiry.note);
    }
    md
}

/// The generated Markdown of the SQLite part: per `synchronous` setting, the scenarios
/// at each connection count, their ratios, and what one writer can do.
fn sqlite_markdown(results: &Results, sqlite: &SqliteResults) -> String {
    let o = &results.options;
    let m = &results.machine;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Latest run, SQLite{}\n",
        if o.quick {
            " (quick: shorter runs; not the numbers to quote)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "- Machine: {} × {} ({:.0} GiB RAM), Linux {}, {}",
        m.cores, m.cpu, m.memory_gib, m.kernel, m.rustc
    );
    if let Some(run) = sqlite.runs.first() {
        let _ = writeln!(
            md,
            "- Database: SQLite {} (compiled into sqlx), a new file per setting in a \
             temporary directory ({}), journal_mode={}, busy timeout 5 s: the example's \
             pool options",
            run.version, run.file_system, run.journal_mode
        );
    }
    let (busy, wall) = sqlite
        .runs
        .iter()
        .flat_map(|run| run.table.iter().flat_map(|(_, row)| row.iter()))
        .fold((0u64, 0.0f64), |(b, w), (_, s)| {
            (
                b + s.cpu.others(),
                w + s.elapsed.as_nanos() as f64 * m.cores as f64,
            )
        });
    let others = if wall > 0.0 { busy as f64 / wall } else { 0.0 };
    let _ = writeln!(
        md,
        "- Command: `{}` ({} measured rounds of {} s per scenario and connection count, order \
         rotated each round, after a warm-up; server: {} actix workers, pool of {}{}); took \
         {:.0} s for everything it ran",
        o.command,
        o.rounds,
        o.seconds.as_secs(),
        crate::server::workers(),
        sqlite.server_pool,
        if o.acquire_ping {
            ", sqlx's ping before each acquire"
        } else {
            ", no ping before each acquire"
        },
        results.took.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- The server (SQLite runs inside it) and the load generator share the machine's {} \
         cores; processes outside the benchmark took {:.0}% of the machine while the \
         scenarios ran{}.\n",
        m.cores,
        others * 100.0,
        if others > 0.1 {
            ": throughput is disturbed by that; the ratios, measured side by side, much less"
        } else {
            ""
        }
    );
    for scenario in SQLITE_SCENARIOS {
        let _ = writeln!(md, "- `{}`: {}", scenario.name(), scenario.describe());
    }
    for run in &sqlite.runs {
        sqlite_run_markdown(&mut md, run);
    }
    md
}

/// A ratio between two scenarios of one table.
type Ratio = fn(&[(Scenario, Stats)]) -> Option<f64>;

fn sqlite_run_markdown(md: &mut String, run: &SqliteRun) {
    let setting = match run.synchronous.as_str() {
        "full" => {
            "synchronous=FULL (sqlx's default, which the example keeps): every commit \
                   waits for the disk"
        }
        "normal" => {
            "synchronous=NORMAL: a commit does not wait for the disk (WAL is \
                     flushed at checkpoints); a power loss can lose the last commits, not \
                     corrupt the file"
        }
        _ => "",
    };
    let _ = writeln!(
        md,
        "\n### SQLite, synchronous={}{}\n",
        run.synchronous.to_ascii_uppercase(),
        if setting.is_empty() {
            String::new()
        } else {
            format!(" — {}", &setting[setting.find(':').map_or(0, |i| i + 2)..])
        }
    );
    let _ = writeln!(
        md,
        "`PRAGMA synchronous` read {} on the benchmark's connection; the server opens the \
         file with the same options.\n",
        run.synchronous_read
    );
    let _ = writeln!(
        md,
        "| connections | scenario | req/s | per round | p50 ms | p99 ms | p99.9 ms | CPU µs/req \
         = server + client | server context switches/req | 503 busy | errors |"
    );
    let _ = writeln!(
        md,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (c, row) in &run.table {
        for (scenario, stats) in row {
            let spread = stats
                .rate_spread()
                .map_or(String::new(), |(min, max)| format!("{min:.0}–{max:.0}"));
            let cpu = stats
                .cpu_per_request()
                .map_or("—".to_owned(), |[server, _, client]| {
                    format!("{:.0} = {server:.0} + {client:.0}", server + client)
                });
            let _ = writeln!(
                md,
                "| {c} | {} | {:.0} | {spread} | {:.2} | {:.2} | {:.2} | {cpu} | {} | {} | {}{} |",
                scenario.name(),
                stats.rate(),
                stats.ms(0.5),
                stats.ms(0.99),
                stats.ms(0.999),
                stats
                    .switches_per_request()
                    .map_or("—".to_owned(), |n| format!("{n:.1}")),
                stats.busy,
                stats.errors,
                stats
                    .first_error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" (first: {e})"))
            );
        }
    }
    let _ = writeln!(md);
    let mut header = "| ratio |".to_owned();
    let mut rule = "|---|".to_owned();
    for (c, _) in &run.table {
        let _ = write!(header, " {c} conn. |");
        rule.push_str("---:|");
    }
    let _ = writeln!(md, "{header} target |\n{rule}---|");
    let ratios: [(&str, Ratio, &str); 4] = [
        (
            "idem/hand throughput",
            |t| rate_ratio(t, Scenario::Idem, Scenario::Hand),
            ">= 0.97",
        ),
        (
            "idem/hand, by CPU per request",
            |t| cpu_ratio(t, Scenario::Idem, Scenario::Hand),
            ">= 0.97",
        ),
        (
            "replay/idem throughput",
            |t| rate_ratio(t, Scenario::Replay, Scenario::Idem),
            "",
        ),
        (
            "replay/idem, by CPU per request",
            |t| cpu_ratio(t, Scenario::Replay, Scenario::Idem),
            "",
        ),
    ];
    for (what, ratio, target) in ratios {
        let mut line = format!("| {what} |");
        let mut verdicts = Vec::new();
        for (_, row) in &run.table {
            let value = ratio(row);
            let _ = write!(
                line,
                " {} |",
                value.map_or("—".to_owned(), |v| format!("{v:.3}"))
            );
            verdicts.push(value.is_some_and(|v| v >= 0.97));
        }
        let verdict = if target.is_empty() {
            String::new()
        } else if verdicts.iter().all(|&pass| pass) {
            format!("{target}: PASS")
        } else {
            format!("{target}: MISS")
        };
        let _ = writeln!(md, "{line} {verdict} |");
    }

    let _ = writeln!(
        md,
        "\n| one writer: this process, one connection, no HTTP | per s | p50 ms | p99 ms |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for (what, stats) in [
        ("one commit (the insert, autocommit)", &run.commit),
        (
            "a first execution's write transaction (`BEGIN IMMEDIATE`, claim, insert, \
             completion, `COMMIT`)",
            &run.writer,
        ),
    ] {
        let _ = writeln!(
            md,
            "| {what} | {:.0} | {:.3} | {:.3} |",
            stats.rate(),
            stats.ms(0.5),
            stats.ms(0.99)
        );
    }
    let idem_rates: Vec<(usize, f64)> = run
        .table
        .iter()
        .filter_map(|(c, _)| Some((*c, run.stats(*c, Scenario::Idem)?.rate())))
        .collect();
    let replay_best = run
        .table
        .iter()
        .filter_map(|(c, _)| run.stats(*c, Scenario::Replay).map(Stats::rate))
        .fold(0.0, f64::max);
    let ceiling = idem_rates
        .iter()
        .map(|(_, rate)| *rate)
        .fold(run.writer.rate(), f64::max);
    let _ = writeln!(
        md,
        "\n**Writer ceiling: about {ceiling:.0} first executions/s** with synchronous={} on \
         this disk, the higher of what one writer alone and `idem` over HTTP reached. SQLite \
         lets one writer in at a time, and a first execution holds the write lock from its \
         `BEGIN IMMEDIATE` to its `COMMIT`, so first executions do not scale with \
         connections: `idem` made {} first executions/s; the write transaction alone, on one \
         connection of this process, {:.0}/s. Replays read without the write lock and \
         scale: up to {replay_best:.0}/s.",
        run.synchronous.to_ascii_uppercase(),
        idem_rates
            .iter()
            .map(|(c, rate)| format!("{rate:.0} at {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        run.writer.rate(),
    );
}

/// Prints the tables and the verdicts on stdout.
pub(crate) fn print(results: &Results) {
    if let Some(pg) = &results.postgres {
        println!("\n{}", markdown(results, pg));
    }
    if let Some(sqlite) = &results.sqlite {
        println!("\n{}", sqlite_markdown(results, sqlite));
    }
}

/// Writes `BENCHMARKS.md` (keeping what is outside the generated parts) and the chart:
/// the section of each part that ran.
pub(crate) fn write(results: &Results) -> Result<(), String> {
    let out = &results.options.out;
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join("BENCHMARKS.md");
    let mut text = fs::read_to_string(&path).unwrap_or_else(|_| {
        "# Benchmarks\n\nWhat idempotency costs. Reproduce with the command below; \
         `idem-bench --help` lists the options.\n"
            .to_owned()
    });
    if let Some(pg) = &results.postgres {
        let section = section(pg);
        text = replace_section(&text, section, &markdown(results, pg));
        chart(results, pg, &out.join(section.chart))?;
        eprintln!("idem-bench: wrote {}", out.join(section.chart).display());
    }
    if let Some(sqlite) = &results.sqlite {
        text = replace_section(&text, &SQLITE, &sqlite_markdown(results, sqlite));
    }
    fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("idem-bench: wrote {}", path.display());
    Ok(())
}

/// `text` with the part between the section's markers replaced by `generated`, or with
/// the section added at the end.
fn replace_section(text: &str, section: &Section, generated: &str) -> String {
    let generated = format!("{}\n{generated}{}", section.begin, section.end);
    match (text.find(section.begin), text.find(section.end)) {
        (Some(begin), Some(end)) if begin < end => format!(
            "{}{generated}{}",
            &text[..begin],
            &text[end + section.end.len()..]
        ),
        _ => format!("{}\n\n{generated}\n", text.trim_end()),
    }
}

/// Two bar charts, one above the other: throughput and p99 per scenario; the floor
/// (plain SQL, no HTTP) in a lighter shade.
fn chart(results: &Results, pg: &PostgresResults, path: &Path) -> Result<(), String> {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(380);
        let bars_of = |value: fn(&Stats) -> f64| -> Vec<Bar> {
            pg.table
                .iter()
                .map(|(scenario, stats)| Bar {
                    name: scenario.name(),
                    value: value(stats),
                    floor: scenario.name().starts_with("floor"),
                })
                .collect()
        };
        let title = |what: &str| {
            format!(
                "{what}, {} connections{}",
                results.options.connections,
                if pg.database.durable() {
                    ""
                } else {
                    " (PostgreSQL without fsync)"
                }
            )
        };
        bars(
            &top,
            &title("requests per second"),
            &bars_of(Stats::rate),
            BLUE,
            0,
        )?;
        bars(
            &bottom,
            &title("p99 latency, ms"),
            &bars_of(|s| s.ms(0.99)),
            RED,
            1,
        )?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

struct Bar {
    name: &'static str,
    value: f64,
    floor: bool,
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    bars: &[Bar],
    color: RGBColor,
    decimals: usize,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let top = bars.iter().map(|b| b.value).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..bars.len() as f64, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        let shade = if bar.floor {
            color.mix(0.35)
        } else {
            color.mix(0.75)
        };
        Rectangle::new(
            [(i as f64 + 0.12, 0.0), (i as f64 + 0.88, bar.value)],
            shade.filled(),
        )
    }))?;
    // Names under the bars and values above them; the SVG keeps them as text.
    let label = ("sans-serif", 13).into_font();
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        Text::new(
            bar.name.to_owned(),
            (i as f64 + 0.1, -top * 0.03),
            label.clone(),
        )
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        Text::new(
            format!("{:.decimals$}", bar.value),
            (i as f64 + 0.3, bar.value + top * 0.06),
            label.clone(),
        )
    }))?;
    Ok(())
}
