//! Command-line options. Hand-parsed: a dozen flags do not justify an argument parser in
//! a crate every `cargo test --workspace` compiles.

use std::path::PathBuf;
use std::time::Duration;

use crate::scenario::Scenario;

pub(crate) const USAGE: &str = "\
usage: idem-bench [--quick] [options]

Runs every scenario against a real PostgreSQL (DATABASE_URL, else a private throwaway
cluster) and a SQLite file in a temporary directory, prints the tables and the ratios
against the targets, and writes BENCHMARKS.md and benchmarks.svg (to the repository
root; with --quick, to target/idem-bench/).

options:
  --quick              smaller tables and shorter runs: a few minutes in all
  --rounds N           measured rounds of every scenario, A B A B ... (default 5; quick 2)
  --seconds S          length of one scenario in one round (default 5; quick 2)
  --connections C      keep-alive connections, and floor workers (default 16)
  --small-keys N       keys in the table for the small scale point (default 10000)
  --big-keys N         keys in the table for the big scale point (default 10000000;
                       quick 300000)
  --expired-keys N     expired keys swept by the expiry benchmark (default 1000000;
                       quick 200000)
  --only A,B,...       run only these scenarios of the table (names as printed)
  --skip PART,...      leave out parts: table (the scenarios), scale, memory, expiry,
                       sqlite; postgres is table, scale, memory and expiry together
  --sqlite-connections C,...
                       connection counts of the SQLite scenarios (default 1,4,16)
  --sqlite-synchronous S,...
                       SQLite's synchronous settings to measure, each with its own file
                       (default full,normal: sqlx's default, as the example has it, and
                       the one that does not flush at every commit)
  --sweep-pace B,MS    the live-load-during-a-sweep test sweeps B rows per batch, MS ms
                       apart, instead of the expiry task's defaults (100, 5)
  --acquire-ping       the server's pool pings a connection before handing it out
                       (sqlx's default test_before_acquire; off by default, as the
                       README recommends for the pool given to idem)
  --out DIR            where BENCHMARKS.md and benchmarks.svg go
  --callgrind N        instead of the benchmark: the server under valgrind's callgrind,
                       N requests per scenario on one connection; prints the server's
                       instructions per request and writes the profiles to the out dir
  -h, --help           this text
";

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) quick: bool,
    pub(crate) rounds: u32,
    pub(crate) seconds: Duration,
    pub(crate) connections: usize,
    pub(crate) small_keys: u64,
    pub(crate) big_keys: u64,
    pub(crate) expired_keys: u64,
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) skip_table: bool,
    pub(crate) skip_scale: bool,
    pub(crate) skip_memory: bool,
    pub(crate) skip_expiry: bool,
    pub(crate) skip_sqlite: bool,
    pub(crate) sqlite_connections: Vec<usize>,
    /// SQLite `synchronous` values, as `PRAGMA synchronous` spells them.
    pub(crate) sqlite_synchronous: Vec<String>,
    pub(crate) acquire_ping: bool,
    /// Rows per batch and pause of the sweep under live load; `None`: the defaults.
    pub(crate) sweep_pace: Option<(u32, Duration)>,
    pub(crate) out: PathBuf,
    pub(crate) callgrind: Option<u64>,
    /// The command line, for the report.
    pub(crate) command: String,
}

impl Options {
    /// `Ok(None)` asks for the usage text.
    pub(crate) fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let quick = args.iter().any(|a| a == "--quick");
        let mut options = Options {
            quick,
            rounds: if quick { 2 } else { 5 },
            seconds: Duration::from_secs(if quick { 2 } else { 5 }),
            connections: 16,
            small_keys: 10_000,
            big_keys: if quick { 300_000 } else { 10_000_000 },
            expired_keys: if quick { 200_000 } else { 1_000_000 },
            scenarios: Scenario::TABLE.to_vec(),
            skip_table: false,
            skip_scale: false,
            skip_memory: false,
            skip_expiry: false,
            skip_sqlite: false,
            sqlite_connections: vec![1, 4, 16],
            sqlite_synchronous: vec!["full".to_owned(), "normal".to_owned()],
            acquire_ping: false,
            sweep_pace: None,
            out: default_out(quick),
            callgrind: None,
            command: command_line(args),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "--quick" => {}
                "--rounds" => options.rounds = number(&value(arg)?, arg, 1)?,
                "--seconds" => options.seconds = Duration::from_secs(number(&value(arg)?, arg, 1)?),
                "--connections" => options.connections = number(&value(arg)?, arg, 1)?,
                "--small-keys" => options.small_keys = number(&value(arg)?, arg, 1)?,
                "--big-keys" => options.big_keys = number(&value(arg)?, arg, 1)?,
                "--expired-keys" => options.expired_keys = number(&value(arg)?, arg, 1)?,
                "--only" => {
                    options.scenarios = value(arg)?
                        .split(',')
                        .map(|name| {
                            Scenario::from_name(name.trim()).ok_or_else(|| {
                                format!(
                                    "--only: no scenario `{name}`; the scenarios are {}",
                                    Scenario::TABLE.map(Scenario::name).join(", ")
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?
                }
                "--skip" => {
                    for part in value(arg)?.split(',') {
                        match part.trim() {
                            "table" => options.skip_table = true,
                            "scale" => options.skip_scale = true,
                            "memory" => options.skip_memory = true,
                            "expiry" => options.skip_expiry = true,
                            "sqlite" => options.skip_sqlite = true,
                            "postgres" => {
                                options.skip_table = true;
                                options.skip_scale = true;
                                options.skip_memory = true;
                                options.skip_expiry = true;
                            }
                            other => {
                                return Err(format!(
                                    "--skip: no part `{other}`; the parts are table, scale, \
                                     memory, expiry, sqlite, postgres"
                                ));
                            }
                        }
                    }
                }
                "--sqlite-connections" => {
                    options.sqlite_connections = value(arg)?
                        .split(',')
                        .map(|n| number(n.trim(), arg, 1))
                        .collect::<Result<_, _>>()?
                }
                "--sqlite-synchronous" => {
                    options.sqlite_synchronous = value(arg)?
                        .split(',')
                        .map(|s| {
                            let s = s.trim().to_ascii_lowercase();
                            ["off", "normal", "full", "extra"]
                                .contains(&s.as_str())
                                .then_some(s.clone())
                                .ok_or_else(|| {
                                    format!(
                                        "--sqlite-synchronous: `{s}` is not one of off, \
                                         normal, full, extra"
                                    )
                                })
                        })
                        .collect::<Result<_, _>>()?
                }
                "--acquire-ping" => options.acquire_ping = true,
                "--sweep-pace" => {
                    let text = value(arg)?;
                    let (rows, ms) = text
                        .split_once(',')
                        .ok_or_else(|| format!("--sweep-pace takes ROWS,MS, not `{text}`"))?;
                    options.sweep_pace = Some((
                        number(rows, arg, 1)?,
                        Duration::from_millis(number(ms, arg, 0)?),
                    ));
                }
                "--out" => options.out = PathBuf::from(value(arg)?),
                "--callgrind" => options.callgrind = Some(number(&value(arg)?, arg, 1)?),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if options.small_keys >= options.big_keys {
            return Err("--small-keys must be below --big-keys".to_owned());
        }
        Ok(Some(options))
    }
}

impl Options {
    /// Every part on PostgreSQL was left out: no cluster is needed.
    pub(crate) fn skips_postgres(&self) -> bool {
        self.skip_table && self.skip_scale && self.skip_memory && self.skip_expiry
    }
}

fn number<T: std::str::FromStr + PartialOrd + From<u8>>(
    text: &str,
    name: &str,
    min: u8,
) -> Result<T, String> {
    text.replace('_', "")
        .parse::<T>()
        .ok()
        .filter(|n| *n >= T::from(min))
        .ok_or_else(|| format!("{name} takes a whole number of at least {min}, not `{text}`"))
}

/// The repository root for a full run, so the report lands beside README.md; a quick
/// run's numbers are not the ones to commit, so they go under the target directory.
fn default_out(quick: bool) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    if !quick {
        return root;
    }
    // target/release/idem-bench → target/idem-bench
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("idem-bench")))
        .unwrap_or_else(|| root.join("target").join("idem-bench"))
}

fn command_line(args: &[String]) -> String {
    let mut command = "cargo run --release -p idem-bench".to_owned();
    if !args.is_empty() {
        command.push_str(" --");
        for arg in args {
            command.push(' ');
            command.push_str(arg);
        }
    }
    command
}
