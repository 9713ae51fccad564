//! `idem`: the operator's tool for idem's key table.
//!
//! ```text
//! idem migrate                                  apply idem's schema
//! idem expire --once [--dry-run] [--batch-size N]  delete keys past their retention
//! idem stats                                    keys by state and age, sizes
//! idem inspect <scope> <key>                    one key and its stored response
//! idem stranded [--limit N] [--step NAME]...    unfinished keys past their retention
//! idem resolve <scope> <key> --failed DETAIL    end an unfinished key's operation, or
//! idem resolve <scope> <key> --status 201 --content-type T --body-file F
//! idem audit [PATH ...] [--format table|json|report] [--deny-unprotected]
//! ```
//!
//! `audit` reads the application's sources and needs no database (its JSON schema is in
//! the `audit` module's docs and in `idem audit --help`). For the others, the database
//! is `--database-url` or `DATABASE_URL`; `stats` and `inspect` read keys kept in Redis
//! with `--redis-url` or `IDEM_REDIS_URL` instead. Results go to stdout; an error is
//! one line on stderr and exit status 1 (2 for a usage error).

mod audit;
mod show;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use idem_runtime::IdempotencyKey;
use idem_runtime::admin::{Expiry, SchemaStatus};
use indicatif::{ProgressBar, ProgressStyle};
use sqlx::Connection;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Operate idem's idempotency-key table in PostgreSQL, and audit an application's routes"
)]
struct Cli {
    /// PostgreSQL URL of the application's database
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,

    /// Redis or Valkey URL, for `stats` and `inspect` of the keys an application keeps
    /// there (any node of a cluster will do); the other commands are the database's
    #[arg(long, env = "IDEM_REDIS_URL", hide_env_values = true, global = true)]
    redis_url: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply idem's schema (safe to repeat, and to run from several places at once)
    Migrate,
    /// Delete keys past their retention, except keys in progress within their lease
    Expire(ExpireArgs),
    /// Keys by state and age, the oldest key in progress, table and index sizes
    Stats,
    /// One key: its state, request fingerprint and stored response
    Inspect {
        /// The key's scope (the value of the handler's scope parameter)
        scope: String,
        /// The key, bare or as a quoted Structured Field string
        // Parsed as idem parses the header, so a mistake is a usage error before connecting.
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
    },
    /// Keys in progress past their retention: what each committed, and its derived keys
    Stranded(StrandedArgs),
    /// End the operation of an unfinished key with the answer its retries get
    Resolve(ResolveArgs),
    /// List the POST, PUT, PATCH and DELETE routes in the application's sources and what
    /// protects each (no database, nothing built)
    Audit(audit::AuditArgs),
}

#[derive(Debug, Args)]
struct StrandedArgs {
    /// Most keys shown, oldest first
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// Also show the derived key of this step (as passed to `Phases::derived_key`);
    /// the derived key of each committed phase's name is always shown
    #[arg(long = "step", value_name = "NAME")]
    steps: Vec<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("answer").required(true).args(["failed", "status"])))]
struct ResolveArgs {
    /// The key's scope
    scope: String,
    /// The key, bare or as a quoted Structured Field string
    #[arg(value_parser = parse_key)]
    key: IdempotencyKey,
    /// Mark the operation failed: retries get a 500 `operation-failed` problem with
    /// this detail
    #[arg(long, value_name = "DETAIL")]
    failed: Option<String>,
    /// Complete the operation with this status (with --content-type and --body-file)
    #[arg(long, value_name = "STATUS", requires_all = ["content_type", "body_file"],
          value_parser = clap::value_parser!(u16).range(100..1000))]
    status: Option<u16>,
    /// Content-Type of the answer
    #[arg(long, value_name = "TYPE", requires = "status")]
    content_type: Option<String>,
    /// File holding the answer's body
    #[arg(long, value_name = "FILE", requires = "status")]
    body_file: Option<std::path::PathBuf>,
    /// How long the resolved key is kept for its client's retries, e.g. 24h or 7d
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = show::parse_duration)]
    keep: Duration,
}

#[derive(Debug, Args)]
struct ExpireArgs {
    /// Run one sweep and exit. Required: the continuous sweep belongs in the application
    /// (`idem::admin::Expiry::spawn`), or in a scheduler that runs this command
    #[arg(long, required = true)]
    once: bool,
    /// Count the keys a sweep would delete; delete nothing
    #[arg(long)]
    dry_run: bool,
    /// Most rows deleted per batch (one short transaction each)
    #[arg(long, value_name = "N", default_value_t = Expiry::DEFAULT_BATCH_SIZE,
          value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// Pause between batches, e.g. 5ms or 1s
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = show::parse_duration)]
    pause: Duration,
}

fn parse_key(text: &str) -> Result<IdempotencyKey, idem_runtime::KeyError> {
    IdempotencyKey::parse(text)
}

/// A failure, shown as `idem: <message>` on one line.
#[derive(Debug)]
struct Failure(String);

impl<E: std::error::Error> From<E> for Failure {
    fn from(error: E) -> Self {
        Self(error.to_string())
    }
}

type Outcome = Result<(), Failure>;

/// A sweep bigger than this many batches shows a progress bar (on a terminal).
const PROGRESS_AFTER_BATCHES: u64 = 10;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Audit(args) = &cli.command {
        return audit_command(args);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&Failure(format!("cannot start: {error}"))),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}

/// `idem audit`: the routes on stdout; warnings and, with `--deny-unprotected`, each
/// unprotected route on stderr, one `idem: ` line each.
fn audit_command(args: &audit::AuditArgs) -> ExitCode {
    match audit::run(args) {
        Ok(audit) => {
            print!("{}", audit.stdout);
            let mut stderr = std::io::stderr().lock();
            for line in &audit.stderr {
                let _ = writeln!(stderr, "idem: {line}");
            }
            if audit.denied {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(message) => fail(&Failure(message)),
    }
}

fn fail(failure: &Failure) -> ExitCode {
    // Database errors may span lines (a server's DETAIL, say); the contract is one line.
    let message = failure.0.split_whitespace().collect::<Vec<_>>().join(" ");
    let _ = writeln!(std::io::stderr(), "idem: {message}");
    ExitCode::FAILURE
}

async fn run(cli: Cli) -> Outcome {
    if let Some(url) = cli
        .redis_url
        .as_deref()
        .filter(|url| !url.trim().is_empty())
    {
        return on_redis(url, &cli.command).await;
    }
    let Some(url) = cli.database_url.filter(|url| !url.trim().is_empty()) else {
        return Err(Failure(
            "no database given: pass --database-url or set DATABASE_URL".into(),
        ));
    };
    let pool = connect(&url).await?;
    let outcome = match &cli.command {
        Command::Migrate => migrate(&pool).await,
        Command::Expire(args) => expire(&pool, args).await,
        Command::Stats => stats(&pool).await,
        Command::Inspect { scope, key } => inspect(&pool, scope, key).await,
        Command::Stranded(args) => stranded(&pool, args).await,
        Command::Resolve(args) => resolve(&pool, args).await,
        Command::Audit(_) => unreachable!("`main` runs the audit without a database"),
    };
    pool.close().await;
    outcome
}

/// `stats` and `inspect` on the keys in Redis. Redis expires them itself and keeps no
/// table, so the database's other commands have nothing to do there.
async fn on_redis(url: &str, command: &Command) -> Outcome {
    let failed = |error: idem_runtime::redis::RedisStoreError| {
        Failure(format!("redis at {}: {error}", show::redact_url(url)))
    };
    let now = std::time::SystemTime::now();
    match command {
        Command::Stats => {
            let stats = idem_runtime::redis::key_stats(url).await.map_err(failed)?;
            print!("{}", show::redis_stats(&stats, now));
            Ok(())
        }
        Command::Inspect { scope, key } => {
            match idem_runtime::redis::inspect_key(url, scope, key.as_str())
                .await
                .map_err(failed)?
            {
                Some(record) => {
                    print!("{}", show::record(&record, now));
                    Ok(())
                }
                None => Err(Failure(format!(
                    "no key {:?} in scope {scope:?}",
                    key.as_str()
                ))),
            }
        }
        Command::Migrate | Command::Expire(_) | Command::Stranded(_) | Command::Resolve(_) => {
            Err(Failure(
                "--redis-url is for `stats` and `inspect`: keys in Redis need no schema, \
                 expire by Redis's own time to live and are never stranded past it"
                    .into(),
            ))
        }
        Command::Audit(_) => unreachable!("`main` runs the audit without a store"),
    }
}

/// How long connecting may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

async fn connect(url: &str) -> Result<PgPool, Failure> {
    let failed = |error: &dyn std::fmt::Display| {
        Failure(format!(
            "cannot connect to {}: {error}",
            show::redact_url(url)
        ))
    };
    let options: PgConnectOptions = url.parse().map_err(|e| failed(&e))?;
    // A pool retries a refused connection until its acquire timeout and then reports
    // only "timed out"; one plain connection first fails fast with the real cause.
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| failed(&format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| failed(&e))?;
    let _ = probe.close().await;
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|e| failed(&e))
}

/// Refuses to work on a schema this build does not know: its SQL could be wrong there.
async fn require_current_schema(pool: &PgPool) -> Outcome {
    let status = idem_runtime::admin::schema_status(pool).await?;
    if status.is_current() {
        return Ok(());
    }
    Err(Failure(format!("{status}: {}", remedy(&status))))
}

fn remedy(status: &SchemaStatus) -> &'static str {
    match status {
        SchemaStatus::Missing | SchemaStatus::Behind { .. } => "run `idem migrate`",
        SchemaStatus::Ahead { .. } => "use the idem CLI of the version that migrated it",
        _ => "repair the schema and its history by hand",
    }
}

async fn migrate(pool: &PgPool) -> Outcome {
    let before = idem_runtime::admin::schema_status(pool).await?;
    match before {
        SchemaStatus::Current { version } => {
            println!("idem's schema is current (version {version}); nothing to apply");
            return Ok(());
        }
        SchemaStatus::Missing | SchemaStatus::Behind { .. } => {}
        // sqlx would refuse too, with a less direct message.
        other => return Err(Failure(format!("{other}: {}", remedy(&other)))),
    }
    idem_runtime::migrate(pool).await?;
    match idem_runtime::admin::schema_status(pool).await? {
        SchemaStatus::Current { version } => {
            println!("applied idem's schema; now at version {version}");
            Ok(())
        }
        other => Err(Failure(format!("{other} after migrating"))),
    }
}

async fn expire(pool: &PgPool, args: &ExpireArgs) -> Outcome {
    require_current_schema(pool).await?;
    let expiry = Expiry::new(pool.clone())
        .batch_size(args.batch_size)
        .pause(args.pause);
    let batch = u64::from(args.batch_size);
    if args.dry_run {
        let due = expiry.count_deletable().await?;
        println!(
            "would delete {due} expired keys in {} batches of at most {batch}; nothing deleted",
            due.div_ceil(batch)
        );
        return Ok(());
    }
    // Counting is a scan of the index's expired range: only worth it for a bar.
    let bar = if std::io::stderr().is_terminal() {
        let due = expiry.count_deletable().await?;
        show_progress(true, due, batch).then(|| progress_bar(due))
    } else {
        None
    };
    let result = expiry
        .sweep_once_with(|so_far| {
            if let Some(bar) = &bar {
                // Keys keep expiring while the sweep runs.
                if so_far.rows_deleted > bar.length().unwrap_or(0) {
                    bar.set_length(so_far.rows_deleted);
                }
                bar.set_position(so_far.rows_deleted);
            }
        })
        .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match result {
        Ok(report) => {
            println!(
                "deleted {} expired keys in {} batches ({}, longest batch {})",
                report.rows_deleted,
                report.batches,
                show::seconds(report.duration),
                show::millis(report.longest_batch)
            );
            Ok(())
        }
        Err(error) => Err(Failure(format!(
            "{} (after deleting {} keys)",
            error,
            error.report().rows_deleted
        ))),
    }
}

/// A bar only where a person watches (stderr is a terminal) and for a sweep long
/// enough to watch.
fn show_progress(stderr_is_terminal: bool, due: u64, batch_size: u64) -> bool {
    stderr_is_terminal && due > PROGRESS_AFTER_BATCHES * batch_size
}

fn progress_bar(due: u64) -> ProgressBar {
    let bar = ProgressBar::new(due);
    if let Ok(style) =
        ProgressStyle::with_template("expiring {bar:40} {human_pos}/{human_len} keys, {eta} left")
    {
        bar.set_style(style);
    }
    bar
}

async fn stats(pool: &PgPool) -> Outcome {
    require_current_schema(pool).await?;
    let stats = idem_runtime::admin::key_stats(pool).await?;
    print!("{}", show::stats(&stats, std::time::SystemTime::now()));
    Ok(())
}

async fn inspect(pool: &PgPool, scope: &str, key: &IdempotencyKey) -> Outcome {
    require_current_schema(pool).await?;
    match idem_runtime::admin::inspect_key(pool, scope, key.as_str()).await? {
        Some(record) => {
            print!("{}", show::record(&record, std::time::SystemTime::now()));
            Ok(())
        }
        None => Err(Failure(format!(
            "no key {:?} in scope {scope:?}",
            key.as_str()
        ))),
    }
}

async fn stranded(pool: &PgPool, args: &StrandedArgs) -> Outcome {
    require_current_schema(pool).await?;
    let keys = idem_runtime::admin::stranded_keys(pool, args.limit).await?;
    print!(
        "{}",
        show::stranded(&keys, &args.steps, std::time::SystemTime::now())
    );
    Ok(())
}

async fn resolve(pool: &PgPool, args: &ResolveArgs) -> Outcome {
    require_current_schema(pool).await?;
    let resolution = match (&args.failed, args.status) {
        (Some(detail), _) => idem_runtime::admin::Resolution::failed(detail),
        (None, Some(status)) => {
            let content_type = args.content_type.as_deref().unwrap_or_default();
            // What an HTTP header value may hold (visible ASCII, spaces and tabs).
            if !content_type
                .bytes()
                .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
            {
                return Err(Failure(format!(
                    "{content_type:?} is not a valid Content-Type value"
                )));
            }
            let path = args
                .body_file
                .as_deref()
                .unwrap_or(std::path::Path::new(""));
            let body = std::fs::read(path)
                .map_err(|error| Failure(format!("cannot read {}: {error}", path.display())))?;
            idem_runtime::admin::Resolution::completed(status, content_type, body)
        }
        (None, None) => unreachable!("clap requires --failed or --status"),
    };
    idem_runtime::admin::resolve_key(pool, &args.scope, args.key.as_str(), &resolution, args.keep)
        .await
        .map_err(|error| {
            Failure(format!(
                "key {:?} in scope {:?}: {error}",
                args.key.as_str(),
                args.scope
            ))
        })?;
    println!(
        "resolved key {:?} in scope {:?}; its retries get this answer for {}",
        args.key.as_str(),
        args.scope,
        show::seconds(args.keep)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_only_on_a_terminal_and_past_ten_batches() {
        assert!(!show_progress(false, 1_000_000, 1000));
        assert!(!show_progress(true, 10_000, 1000));
        assert!(show_progress(true, 10_001, 1000));
    }

    #[test]
    fn the_arguments_parse_as_documented() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "idem",
            "expire",
            "--once",
            "--dry-run",
            "--batch-size",
            "50",
            "--pause",
            "1s",
        ])
        .unwrap();
        let Command::Expire(args) = cli.command else {
            panic!("{cli:?}")
        };
        assert!(args.once && args.dry_run);
        assert_eq!(args.batch_size, 50);
        assert_eq!(args.pause, Duration::from_secs(1));
        assert!(
            Cli::try_parse_from(["idem", "expire"]).is_err(),
            "--once is required"
        );
        assert!(Cli::try_parse_from(["idem", "expire", "--once", "--batch-size", "0"]).is_err());
    }
}
