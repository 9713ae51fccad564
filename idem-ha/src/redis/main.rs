//! `idem-redis-durability`: idem's Redis key store under a load of keyed requests while
//! the Redis server dies, measured at a fake provider; then every key is sent again.
//!
//! ```text
//! cargo run -p idem-ha --bin idem-redis-durability              # every scenario once
//! cargo run -p idem-ha --bin idem-redis-durability -- --runs 5 --scenario aof-always
//! ```
//!
//! Each request is the phased form as a handler on Redis runs it: claim the key, call
//! the provider with the derived key `{key}:send`, record the phase `send` with its
//! output, complete with a 201. A client retries a request (errors, 409, a lost
//! takeover, a fenced write) until it is acknowledged, then sends a new key. Scenarios:
//!
//! - `aof-always`, `aof-everysec`: one `redis-server` with `appendonly yes` and that
//!   `appendfsync`, in a directory of its own; SIGKILLed under load, started again on the
//!   same directory and port;
//! - `no-aof`: the same without an append-only file (nothing on disk): the control, in
//!   which the checker must see acknowledged keys lost;
//! - `cluster`, `cluster-wait`: a Redis Cluster of 3 masters with a replica each; one
//!   master SIGKILLed under load, its replica promoted, the old master started again (it
//!   rejoins as a replica); with `cluster-wait` an answer counts as acknowledged only
//!   once `WAIT 1` on the key's master confirmed it;
//! - `cluster-lag`, `cluster-lag-wait`: the same, with the victim's replica stopped
//!   (SIGSTOP) for `--lag` seconds before the kill and let go right after it, as a
//!   replica fallen behind: what the master answered meanwhile may not have reached it.
//!
//! Afterwards the checker sends every key again: an acknowledged key that is not a replay
//! of the answer its client got is *lost* (gone, or not completed). The provider counts
//! raw calls per key and the effects it made after its dedupe by derived key.
//!
//! The guarantees asserted (exit 1 when broken): `aof-always`, `cluster-wait` and
//! `cluster-lag-wait` lose no acknowledged key; `no-aof` loses some (else the checker is blind); in every scenario
//! every key completes, no replay differs from the acknowledged answer, and the provider
//! makes no effect twice after its dedupe. `aof-everysec`, `cluster` and `cluster-lag`
//! losses are printed, not asserted. A setup failure panics (exit 101); every server is killed on
//! the way out.

mod load;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use idem_runtime::redis::RedisStore;
use idem_testkit::{RedisCluster, RedisServer};
use load::{Checked, ClientLog, Provider, Shared, Stats, Store};

/// Redis durability runs for idem's Redis key store.
#[derive(Debug, Parser)]
#[command(name = "idem-redis-durability", version)]
struct Args {
    /// The scenarios to run, in this order (every one when none is named).
    #[arg(long, value_enum)]
    scenario: Vec<Scenario>,
    /// Runs of each scenario; the summary gives the median.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Seconds of load before the kill.
    #[arg(long, default_value_t = 2.0)]
    before: f64,
    /// Seconds of load once the server (or the cluster) is back.
    #[arg(long, default_value_t = 2.0)]
    after: f64,
    /// Seconds a killed single node stays down before it is started again.
    #[arg(long, default_value_t = 0.5)]
    down: f64,
    /// Seconds the victim's replica is stopped (SIGSTOP) before the master is killed, in
    /// the `cluster-lag` scenarios.
    #[arg(long, default_value_t = 2.0)]
    lag: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    AofAlways,
    AofEverysec,
    NoAof,
    Cluster,
    ClusterWait,
    ClusterLag,
    ClusterLagWait,
}

impl Scenario {
    const ALL: [Scenario; 7] = [
        Scenario::AofAlways,
        Scenario::AofEverysec,
        Scenario::NoAof,
        Scenario::Cluster,
        Scenario::ClusterWait,
        Scenario::ClusterLag,
        Scenario::ClusterLagWait,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::AofAlways => "aof-always",
            Scenario::AofEverysec => "aof-everysec",
            Scenario::NoAof => "no-aof",
            Scenario::Cluster => "cluster",
            Scenario::ClusterWait => "cluster-wait",
            Scenario::ClusterLag => "cluster-lag",
            Scenario::ClusterLagWait => "cluster-lag-wait",
        }
    }

    fn waits(self) -> bool {
        matches!(self, Scenario::ClusterWait | Scenario::ClusterLagWait)
    }
}

/// One run's figures.
#[derive(Debug, Default, Clone)]
struct Figures {
    sent: u64,
    acked: u64,
    acked_before_kill: u64,
    lost: u64,
    lost_acked_before_kill: u64,
    changed: u64,
    failed: u64,
    store_calls: u64,
    errors: u64,
    takeovers: u64,
    fenced: u64,
    wait_short: u64,
    provider: load::ProviderFigures,
    /// The longest stretch without any acknowledgement, from a second before the kill.
    outage: Duration,
    /// The longest one key took from its first send to its acknowledgement.
    longest_key: Duration,
    /// Acknowledged keys per second of load.
    rate: f64,
    /// Until the replica was promoted (cluster).
    promoted_after: Option<Duration>,
    elapsed: Duration,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let scenarios = if args.scenario.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenario.clone()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut ok = true;
    let mut summary = Vec::new();
    for scenario in scenarios {
        let mut runs = Vec::new();
        for run in 1..=args.runs {
            let figures = runtime.block_on(one_run(&args, scenario, run));
            let broken = guarantee(scenario, &figures);
            println!(
                "{} run {run}: {}{}",
                scenario.name(),
                describe(&figures),
                if broken.is_empty() {
                    String::new()
                } else {
                    format!("\n  GUARANTEE BROKEN: {}", broken.join("; "))
                }
            );
            ok &= broken.is_empty();
            runs.push(figures);
        }
        summary.push((scenario, runs));
    }
    println!(
        "\nsummary (median over runs; load: {} clients, {:.1} s before the kill, {:.1} s after recovery):",
        args.clients, args.before, args.after
    );
    for (scenario, runs) in &summary {
        println!(
            "  {:<13} runs {}: acknowledged {}, lost {} (per run: {}), provider calls {}, keys called twice (raw) {} (per run: {}), effects twice after dedupe {}, keys called under two generations {}, longest without an acknowledgement {:.2} s, longest wait of one key {:.2} s, {:.0} keys/s",
            scenario.name(),
            runs.len(),
            median(runs.iter().map(|f| f.acked)),
            median(runs.iter().map(|f| f.lost)),
            join(runs.iter().map(|f| f.lost)),
            median(runs.iter().map(|f| f.provider.calls)),
            median(runs.iter().map(|f| f.provider.twice_raw)),
            join(runs.iter().map(|f| f.provider.twice_raw)),
            median(runs.iter().map(|f| f.provider.twice_deduped)),
            median(runs.iter().map(|f| f.provider.twice_by_generation)),
            median_duration(runs.iter().map(|f| f.outage)).as_secs_f64(),
            median_duration(runs.iter().map(|f| f.longest_key)).as_secs_f64(),
            median(runs.iter().map(|f| f.rate as u64)),
        );
    }
    if ok {
        println!("idem-redis-durability: every guarantee held");
        ExitCode::SUCCESS
    } else {
        println!("idem-redis-durability: a guarantee was broken");
        ExitCode::from(1)
    }
}

/// The guarantees of `scenario` that `f` breaks.
fn guarantee(scenario: Scenario, f: &Figures) -> Vec<String> {
    let mut broken = Vec::new();
    match scenario {
        Scenario::AofAlways | Scenario::ClusterWait | Scenario::ClusterLagWait if f.lost > 0 => {
            broken.push(format!(
                "{} acknowledged keys lost, 0 allowed with {}",
                f.lost,
                scenario.name()
            ))
        }
        Scenario::NoAof if f.lost_acked_before_kill == 0 => broken.push(format!(
            "no key lost without an append-only file, though {} were acknowledged before \
             the kill: the checker does not see losses",
            f.acked_before_kill
        )),
        _ => {}
    }
    if f.acked_before_kill == 0 {
        broken.push("no key acknowledged before the kill: no load".to_owned());
    }
    if f.failed > 0 || f.acked < f.sent {
        broken.push(format!(
            "{} keys not completed by their clients, {} not by the checker",
            f.sent - f.acked,
            f.failed
        ));
    }
    if f.changed > 0 {
        broken.push(format!(
            "{} replays differ from the acknowledged answer",
            f.changed
        ));
    }
    if f.provider.twice_deduped > 0 {
        broken.push(format!(
            "{} effects made twice after the provider's dedupe",
            f.provider.twice_deduped
        ));
    }
    broken
}

fn describe(f: &Figures) -> String {
    format!(
        "{} keys sent, {} acknowledged ({} before the kill); {} store calls, {} errors, {} takeovers, {} fenced writes{}; {:.0} keys/s; longest without an acknowledgement {:.2} s, longest wait of one key {:.2} s{}; checker: {} lost ({} of them acknowledged before the kill), {} replays changed, {} not completed; provider: {} calls, {} effects, {} keys called twice (raw), {} effects twice after its dedupe by `{{key}}:send`, {} keys called under two generations; {:.1} s",
        f.sent,
        f.acked,
        f.acked_before_kill,
        f.store_calls,
        f.errors,
        f.takeovers,
        f.fenced,
        if f.wait_short > 0 {
            format!(", {} WAITs with no replica in time", f.wait_short)
        } else {
            String::new()
        },
        f.rate,
        f.outage.as_secs_f64(),
        f.longest_key.as_secs_f64(),
        f.promoted_after
            .map(|d| format!(", replica promoted after {:.2} s", d.as_secs_f64()))
            .unwrap_or_default(),
        f.lost,
        f.lost_acked_before_kill,
        f.changed,
        f.failed,
        f.provider.calls,
        f.provider.effects,
        f.provider.twice_raw,
        f.provider.twice_deduped,
        f.provider.twice_by_generation,
        f.elapsed.as_secs_f64(),
    )
}

/// The servers of one run, killed when dropped (also on a panic).
enum Servers {
    /// The server and its directory, removed after it.
    Single(RedisServer, #[allow(dead_code)] tempdir::Dir),
    Cluster(RedisCluster),
}

mod tempdir {
    //! A directory removed on drop.

    use std::path::{Path, PathBuf};

    pub(crate) struct Dir(PathBuf);

    impl Dir {
        pub(crate) fn new(name: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "idem-redis-durability-{name}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Self(path)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn one_run(args: &Args, scenario: Scenario, run: usize) -> Figures {
    let started = Instant::now();
    let (mut servers, store) = match scenario {
        Scenario::AofAlways | Scenario::AofEverysec | Scenario::NoAof => {
            let dir = tempdir::Dir::new(scenario.name());
            let server = tokio::task::block_in_place(|| match scenario {
                Scenario::AofAlways => RedisServer::start_durable(dir.path(), "always"),
                Scenario::AofEverysec => RedisServer::start_durable(dir.path(), "everysec"),
                _ => RedisServer::start(),
            });
            let store = RedisStore::connect(&server.url())
                .await
                .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()));
            (Servers::Single(server, dir), Store::Single(store))
        }
        Scenario::Cluster
        | Scenario::ClusterWait
        | Scenario::ClusterLag
        | Scenario::ClusterLagWait => {
            let cluster = tokio::task::block_in_place(|| RedisCluster::start_with_replicas(1));
            let urls = cluster.urls();
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            let store = RedisStore::connect_cluster(&nodes)
                .await
                .unwrap_or_else(|e| panic!("connect to the cluster {urls:?}: {e}"));
            let wait = scenario.waits();
            (Servers::Cluster(cluster), Store::Cluster { store, wait })
        }
    };
    let shared = Arc::new(Shared {
        store,
        provider: Provider::default(),
        stats: Stats::default(),
        stop: AtomicBool::new(false),
    });
    let load_started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            tokio::spawn(load::client(
                shared.clone(),
                format!("{}-{run}-c{c}", scenario.name()),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(args.before)).await;
    let mut kill = Instant::now();
    let mut promoted_after = None;
    match &mut servers {
        Servers::Single(server, _) => {
            server.kill();
            tokio::time::sleep(Duration::from_secs_f64(args.down)).await;
            tokio::task::block_in_place(|| server.restart());
        }
        Servers::Cluster(cluster) => {
            let victim = tokio::task::block_in_place(|| cluster.masters()[0]);
            let lagging = matches!(scenario, Scenario::ClusterLag | Scenario::ClusterLagWait)
                .then(|| tokio::task::block_in_place(|| cluster.replicas_of(victim)[0]));
            if let Some(replica) = lagging {
                // The replica falls behind: the master keeps answering while what it
                // sends the replica waits in socket buffers and then in its own memory.
                cluster.pause(replica);
                tokio::time::sleep(Duration::from_secs_f64(args.lag)).await;
                kill = Instant::now();
                cluster.kill(victim);
                cluster.resume(replica);
            } else {
                cluster.kill(victim);
            }
            tokio::task::block_in_place(|| {
                cluster.wait_for_promotion(victim);
                promoted_after = Some(kill.elapsed());
                // Back as the new master's replica, so that WAIT 1 can be met on its slots.
                cluster.restart(victim);
            });
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(args.after)).await;
    shared.stop.store(true, Ordering::Relaxed);
    let load_time = load_started.elapsed();
    let mut logs: Vec<Arc<ClientLog>> = Vec::new();
    for client in clients {
        logs.push(Arc::new(client.await.expect("a client panicked")));
    }
    let checks: Vec<_> = logs
        .iter()
        .map(|log| tokio::spawn(load::check(shared.clone(), log.clone(), kill)))
        .collect();
    let mut checked = Vec::new();
    for check in checks {
        checked.push(check.await.expect("the checker panicked"));
    }
    let mut f = Figures {
        promoted_after,
        ..Figures::default()
    };
    for log in &logs {
        f.sent += log.sent.len() as u64;
        f.acked += log.acked.len() as u64;
        f.acked_before_kill += log.acked.values().filter(|o| o.at < kill).count() as u64;
        for (key, e) in &log.given_up {
            eprintln!("  {}: {key} given up: {e}", scenario.name());
        }
    }
    let mut acks: Vec<Instant> = logs
        .iter()
        .flat_map(|log| log.acked.values())
        .map(|o| o.at)
        .filter(|&at| at + Duration::from_secs(1) > kill)
        .collect();
    acks.sort_unstable();
    f.outage = acks
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(Duration::ZERO);
    f.longest_key = logs
        .iter()
        .flat_map(|log| log.acked.values())
        .map(|o| o.waited)
        .max()
        .unwrap_or(Duration::ZERO);
    f.rate = f.acked as f64 / load_time.as_secs_f64();
    for c in &checked {
        add_checked(&mut f, c, scenario);
    }
    let stats = &shared.stats;
    f.store_calls = stats.calls.load(Ordering::Relaxed);
    f.errors = stats.errors.load(Ordering::Relaxed);
    f.takeovers = stats.takeovers.load(Ordering::Relaxed);
    f.fenced = stats.fenced.load(Ordering::Relaxed);
    f.wait_short = stats.wait_short.load(Ordering::Relaxed);
    f.provider = shared.provider.figures();
    drop(servers);
    f.elapsed = started.elapsed();
    f
}

fn add_checked(f: &mut Figures, c: &Checked, scenario: Scenario) {
    f.lost += c.lost.len() as u64;
    f.lost_acked_before_kill += c.lost_acked_before_kill;
    f.changed += c.changed.len() as u64;
    f.failed += c.failed.len() as u64;
    // The control loses most keys: name only the first few of any scenario.
    for key in c.lost.iter().take(3) {
        if scenario != Scenario::NoAof {
            eprintln!("  {}: acknowledged key {key} lost", scenario.name());
        }
    }
    for key in &c.changed {
        eprintln!("  {}: key {key} replayed another answer", scenario.name());
    }
    for (key, e) in &c.failed {
        eprintln!(
            "  {}: checker could not complete {key}: {e}",
            scenario.name()
        );
    }
}

fn median(values: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn median_duration(values: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = values.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(Duration::ZERO)
}

fn join(values: impl Iterator<Item = u64>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}
