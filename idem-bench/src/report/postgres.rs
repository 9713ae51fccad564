//! The generated Markdown of the PostgreSQL parts.

use std::fmt::Write as _;

use super::checks::{checks, rate_ratio};
use super::sections::section;
use crate::load::STORM_DUPLICATES;
use crate::results::{PostgresResults, Results};
use crate::scenario::Scenario;
use crate::stats::Stats;

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
pub(super) fn markdown(results: &Results, pg: &PostgresResults) -> String {
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
    let _ = writeln!(
        md,
        "| ratio | this run | median of the rounds' ratios | target | |"
    );
    let _ = writeln!(md, "|---|---:|---:|---|---|");
    let shown = |value: Option<f64>| value.map_or("—".to_owned(), |v| format!("{v:.3}"));
    for check in checks(pg) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            check.what,
            shown(check.value),
            shown(check.paired),
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
                .map_or(idem::admin::Expiry::DEFAULT_BATCH_SIZE, |(rows, _)| rows),
            o.sweep_pace
                .map_or(idem::admin::Expiry::DEFAULT_PAUSE, |(_, pause)| pause)
                .as_millis(),
            live.rows_during
        );
    }
    if !expiry.note.is_empty() {
        let _ = writeln!(md, "\n{}", expiry.note);
    }
    md
}
