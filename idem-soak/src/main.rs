//! `idem-soak`: many clients send keyed `POST /orders` (idem's single-transaction form)
//! and `POST /payments` (the phased form, which charges the example's provider with a
//! derived key) requests to several processes of the example service, with random reuse
//! of keys, random retries and client timeouts and random payload mismatches, while
//! processes are killed (SIGKILL) and started again, the database is restarted, cleanly
//! and as in a crash, and time jumps: keys are moved past their retention (some leases
//! ended too) and swept. Afterwards a checker retries every key until it completes and
//! verifies, from the database, the recorded answers and the jumps, that idem kept its
//! promise.
//!
//! ```text
//! cargo run --release -p idem-soak -- --seconds 60 --requests 20000
//! ```
//!
//! Everything runs on this machine: a private PostgreSQL cluster (the server binaries must
//! be installed; `DATABASE_URL` is not used, since a shared server cannot be restarted)
//! and the example processes listen on 127.0.0.1. The run is bounded by `--seconds` and
//! `--requests`, whichever ends first. Exit status 0 when the checker found no violation,
//! 1 when it found some, 2 when the run could not be set up.

mod checker;
mod faults;
mod fleet;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use idem_testkit::PgCluster;

/// Soak test for idem with fault injection and a checker.
#[derive(Debug, Parser)]
#[command(name = "idem-soak", version)]
struct Args {
    /// How long the clients send requests, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The most requests the clients send, retries included (the checker's own retries
    /// come on top).
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 24)]
    clients: usize,
    /// Example processes sharing the database.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Seconds between two injected faults; 0 injects none.
    #[arg(long, default_value_t = 3.0)]
    fault_every: f64,
    /// Seed of the random choices (printed, so a run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// The example binary to run; by default it is built with cargo (`--release` when this
    /// program is a release build).
    #[arg(long)]
    server: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idem-soak: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(error) => {
            eprintln!("idem-soak: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs the soak and the checker; returns the number of violations.
async fn run(args: Args) -> Result<usize, String> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let server = match args.server {
        Some(path) => path,
        None => tokio::task::spawn_blocking(fleet::build_example)
            .await
            .map_err(|e| e.to_string())??,
    };
    let cluster = Arc::new(
        tokio::task::spawn_blocking(PgCluster::start)
            .await
            .map_err(|e| format!("the database did not start: {e}"))?,
    );
    println!(
        "idem-soak: seed {seed}, {} s or {} requests, {} clients, {} instances, a fault every \
         {} s; PostgreSQL on 127.0.0.1:{}",
        args.seconds,
        args.requests,
        args.clients,
        args.instances,
        args.fault_every,
        cluster.port()
    );
    let fleet = Arc::new(fleet::Fleet::start(server, cluster.url(), args.instances).await?);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let load = workload::Load::new(seed, args.requests, deadline, fleet.bases());
    let clients: Vec<_> = (0..args.clients)
        .map(|client| tokio::spawn(Arc::clone(&load).client(client)))
        .collect();
    let injector = (args.fault_every > 0.0).then(|| {
        tokio::spawn(faults::inject(
            Arc::clone(&fleet),
            Arc::clone(&cluster),
            Duration::from_secs_f64(args.fault_every),
            deadline,
            seed ^ 0x5eed,
            started,
        ))
    });
    for client in clients {
        client.await.map_err(|e| format!("a client failed: {e}"))?;
    }
    let injected = match injector {
        Some(task) => task
            .await
            .map_err(|e| format!("the injector failed: {e}"))?,
        None => faults::Injected::default(),
    };
    let load_time = started.elapsed();
    // Whatever the last fault left down comes back before the checker runs.
    let up = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || up.resume())
        .await
        .map_err(|e| e.to_string())?;
    fleet.ensure_all_up().await?;

    let sent = load.summary();
    println!(
        "sent in {:.1} s: {}",
        load_time.as_secs_f64(),
        sent.describe()
    );
    println!("faults injected: {}", injected.describe());
    for (at, fault) in &injected.faults {
        println!("  {:>6.1} s  {fault}", at.as_secs_f64());
    }

    let report = checker::check(&load, &fleet.bases(), &cluster.url(), &injected.jumps).await?;
    println!("checker: {}", report.describe());
    for violation in report.violations.iter().take(50) {
        println!("  violation: {violation}");
    }
    if report.violations.len() > 50 {
        println!("  ... and {} more", report.violations.len() - 50);
    }
    println!("violations: {}", report.violations.len());
    fleet.stop_all().await;
    Ok(report.violations.len())
}
