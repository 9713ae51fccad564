//! The table, the ratios against the targets, `BENCHMARKS.md` and the chart:
//! `checks.rs` the targets, `postgres.rs` and `sqlite.rs` the Markdown of each part,
//! `chart.rs` the SVG, `sections.rs` where each goes in the file.

use std::fs;

mod chart;
mod checks;
mod postgres;
mod sections;
mod sqlite;

use chart::chart;
use postgres::markdown;
use sections::{SQLITE, Section, section};
use sqlite::sqlite_markdown;

use crate::results::Results;

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
