//! The generated Markdown of the SQLite part.

use std::fmt::Write as _;

use super::checks::{cpu_ratio, rate_ratio};
use crate::results::Results;
use crate::scenario::Scenario;
use crate::sqlite::{SCENARIOS as SQLITE_SCENARIOS, SqliteResults, SqliteRun};
use crate::stats::Stats;

/// The generated Markdown of the SQLite part: per `synchronous` setting, the scenarios
/// at each connection count, their ratios, and what one writer can do.
pub(super) fn sqlite_markdown(results: &Results, sqlite: &SqliteResults) -> String {
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
