//! Where in `BENCHMARKS.md` each part's generated text goes, and its chart's file.

use crate::results::PostgresResults;

/// The part of `BENCHMARKS.md` a run writes, and its chart beside it. A run on a server
/// without durability (the private cluster) and one on a durable server (`DATABASE_URL`)
/// each have their own, so both readings can stand side by side; what is outside the
/// markers (notes written by people) survives every run.
pub(super) struct Section {
    pub(super) begin: &'static str,
    pub(super) end: &'static str,
    pub(super) chart: &'static str,
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
pub(super) const SQLITE: Section = Section {
    begin: "<!-- idem-bench: generated from here (SQLite) -->",
    end: "<!-- idem-bench: generated up to here (SQLite) -->",
    chart: "",
};

pub(super) fn section(pg: &PostgresResults) -> &'static Section {
    if pg.database.durable() {
        &DURABLE
    } else {
        &FAST
    }
}
