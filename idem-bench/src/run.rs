//! One benchmark run, part by part.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::TestDb;

use crate::child::Server;
use crate::cpu::Probe;
use crate::db;
use crate::expiry::{self, ExpiryResults};
use crate::floor::{self, Floor};
use crate::load::{self, HttpLoad, KeyLog, Mode, STORM_DUPLICATES};
use crate::memory;
use crate::options::Options;
use crate::report;
use crate::results::{Machine, MemoryResults, PostgresResults, Results};
use crate::scale;
use crate::scenario::Scenario;
use crate::sqlite;
use crate::stats::Stats;

pub(crate) async fn run(options: Options) -> Result<(), String> {
    if let Some(requests) = options.callgrind {
        return crate::profile::run(&options, requests).await;
    }
    let started = Instant::now();
    let sqlite = if options.skip_sqlite {
        None
    } else {
        Some(sqlite::run(&options).await?)
    };
    let postgres = if options.skips_postgres() {
        None
    } else {
        Some(postgres(&options).await?)
    };
    let results = Results {
        machine: Machine::this(),
        postgres,
        sqlite,
        took: started.elapsed(),
        options,
    };
    report::print(&results);
    report::write(&results)
}

/// The parts on PostgreSQL: the table, memory, scale and expiry.
async fn postgres(options: &Options) -> Result<PostgresResults, String> {
    let c = options.connections;
    // Every connection the storm holds waits for the key's row lock with a pool
    // connection in hand; the pool must not be what makes duplicates wait.
    let server_pool = (c.max(load::storm_groups(c) * STORM_DUPLICATES) + 4) as u32;
    eprintln!("idem-bench: starting PostgreSQL");
    let db = TestDb::new().await;
    let pool = db::pool(&db, c as u32 + 2).await?;
    db::create_schema(&pool).await?;
    let database = db::server_info(&pool).await?;
    eprintln!("idem-bench: {}", database.summary());
    // The Redis rows' own server: private, on a free loopback port, nothing on disk
    // (as the private PostgreSQL runs without fsync); killed when this part ends.
    let redis = options
        .scenarios
        .iter()
        .any(|s| s.on_redis())
        .then(idem_testkit::RedisServer::start);
    let redis_url = redis.as_ref().map(idem_testkit::RedisServer::url);
    let redis_args: Vec<&str> = match &redis_url {
        Some(url) => vec!["--redis", url],
        None => Vec::new(),
    };
    let server = Server::start_with_args(
        db.url(),
        server_pool,
        options.acquire_ping,
        &redis_args,
        &[],
        Duration::from_secs(60),
    )?;
    eprintln!(
        "idem-bench: server pid {} on {}, {} workers, pool {server_pool}",
        server.pid(),
        server.addr,
        crate::server::workers()
    );

    let completed = Completed {
        redis_pid: redis.as_ref().map(idem_testkit::RedisServer::pid),
        ..Completed::default()
    };
    let (table, breakdown) = if options.skip_table {
        (Vec::new(), Vec::new())
    } else {
        let table = rounds(options, &server, &pool, &completed).await?;
        let mut breakdown = Vec::new();
        for floor in [Floor::Bare, Floor::Hand, Floor::Protocol, Floor::Replay] {
            breakdown
                .push(floor::breakdown(&pool, floor, options.seconds, &completed.floor).await?);
        }
        (table, breakdown)
    };

    let memory = if options.skip_memory {
        None
    } else {
        Some(memory_part(options, &server, &completed).await?)
    };
    server.stop();
    drop(pool);

    let scale = if options.skip_scale {
        None
    } else {
        Some(scale::run(options, server_pool).await?)
    };
    let expiry = if options.skip_expiry {
        ExpiryResults::skipped("left out with --skip expiry")
    } else {
        expiry::run(options, server_pool).await?
    };
    drop(db);
    drop(redis);
    Ok(PostgresResults {
        database,
        server_workers: crate::server::workers(),
        server_pool,
        table,
        breakdown,
        memory,
        scale,
        expiry,
    })
}

/// Keys that completed, per endpoint, for the replay scenarios.
#[derive(Debug, Default)]
struct Completed {
    idem: Arc<KeyLog>,
    hand: Arc<KeyLog>,
    floor: Arc<KeyLog>,
    axum_idem: Arc<KeyLog>,
    redis_hand: Arc<KeyLog>,
    redis_idem: Arc<KeyLog>,
    /// The Redis rows' server, whose CPU time those rows count instead of PostgreSQL's.
    redis_pid: Option<u32>,
}

/// The HTTP load of a scenario of the table; `None` for the floor.
fn http_load(scenario: Scenario, completed: &Completed) -> Option<HttpLoad> {
    let (path, mode) = match scenario {
        Scenario::Bare => ("/bare/orders", Mode::Fresh(None)),
        Scenario::Hand => (
            "/hand/orders",
            Mode::Fresh(Some(Arc::clone(&completed.hand))),
        ),
        Scenario::Idem => (
            "/idem/orders",
            Mode::Fresh(Some(Arc::clone(&completed.idem))),
        ),
        Scenario::Replay => ("/idem/orders", Mode::Replay(Arc::clone(&completed.idem))),
        Scenario::HandReplay => ("/hand/orders", Mode::Replay(Arc::clone(&completed.hand))),
        Scenario::Storm => ("/idem/orders", Mode::Storm),
        Scenario::Phased => ("/phased/orders", Mode::Fresh(None)),
        // The axum server has the same paths (`server_axum.rs`).
        Scenario::AxumBare => ("/bare/orders", Mode::Fresh(None)),
        Scenario::AxumHand => ("/hand/orders", Mode::Fresh(None)),
        Scenario::AxumIdem => (
            "/idem/orders",
            Mode::Fresh(Some(Arc::clone(&completed.axum_idem))),
        ),
        Scenario::AxumReplay => (
            "/idem/orders",
            Mode::Replay(Arc::clone(&completed.axum_idem)),
        ),
        Scenario::RedisBare => (crate::redis_rows::BARE_PATH, Mode::Fresh(None)),
        Scenario::RedisHand => (
            crate::redis_rows::HAND_PATH,
            Mode::Fresh(Some(Arc::clone(&completed.redis_hand))),
        ),
        Scenario::RedisHandReplay => (
            crate::redis_rows::HAND_PATH,
            Mode::Replay(Arc::clone(&completed.redis_hand)),
        ),
        Scenario::RedisIdem => (
            crate::redis_rows::IDEM_PATH,
            Mode::Fresh(Some(Arc::clone(&completed.redis_idem))),
        ),
        Scenario::RedisReplay => (
            crate::redis_rows::IDEM_PATH,
            Mode::Replay(Arc::clone(&completed.redis_idem)),
        ),
        Scenario::FloorBare
        | Scenario::FloorHand
        | Scenario::FloorProtocol
        | Scenario::FloorReplay => return None,
    };
    Some(HttpLoad { path, mode })
}

async fn run_scenario(
    scenario: Scenario,
    options: &Options,
    server: &Server,
    pool: &sqlx::PgPool,
    completed: &Completed,
    duration: Duration,
) -> Result<Stats, String> {
    let probe = match completed.redis_pid {
        Some(redis) if scenario.on_redis() => Probe::with_redis(Some(server.pid()), redis),
        _ => Probe::new(Some(server.pid()), pool).await,
    };
    let before = probe.sample();
    let mut stats =
        run_scenario_inner(scenario, options, server, pool, completed, duration).await?;
    stats.cpu = probe.sample() - before;
    Ok(stats)
}

async fn run_scenario_inner(
    scenario: Scenario,
    options: &Options,
    server: &Server,
    pool: &sqlx::PgPool,
    completed: &Completed,
    duration: Duration,
) -> Result<Stats, String> {
    let c = options.connections;
    match scenario {
        Scenario::FloorBare => floor::run(pool, Floor::Bare, c, duration, &completed.floor).await,
        Scenario::FloorHand => floor::run(pool, Floor::Hand, c, duration, &completed.floor).await,
        Scenario::FloorProtocol => {
            floor::run(pool, Floor::Protocol, c, duration, &completed.floor).await
        }
        Scenario::FloorReplay => {
            floor::run(pool, Floor::Replay, c, duration, &completed.floor).await
        }
        _ => {
            let load = http_load(scenario, completed).expect("an HTTP scenario");
            let addr = if scenario.on_axum() {
                server.axum
            } else {
                server.addr
            };
            load::run(addr, &load, c, duration).await
        }
    }
}

/// A warm-up round, then `options.rounds` rounds of every scenario, each round starting
/// one scenario later (A B C, B C A, ...), so that neither drift over time nor the
/// position after a particular scenario favours one of them.
async fn rounds(
    options: &Options,
    server: &Server,
    pool: &sqlx::PgPool,
    completed: &Completed,
) -> Result<Vec<(Scenario, Stats)>, String> {
    let mut scenarios = options.scenarios.clone();
    // A replay needs completed keys: the warm-up runs the scenario that makes them first.
    let sources: Vec<Scenario> = scenarios.iter().filter_map(|s| s.replays()).collect();
    for source in sources {
        if !scenarios.contains(&source) {
            scenarios.insert(0, source);
        }
    }
    let warm_up = options.seconds.min(Duration::from_secs(2));
    eprintln!("idem-bench: warm-up, {warm_up:?} per scenario");
    let mut order = scenarios.clone();
    order.sort_by_key(|s| s.replays().is_some());
    for &scenario in &order {
        let stats = run_scenario(scenario, options, server, pool, completed, warm_up).await?;
        if stats.errors > 0 {
            return Err(format!(
                "warm-up of {}: {} errors, the first: {}",
                scenario.name(),
                stats.errors,
                stats.first_error.unwrap_or_default()
            ));
        }
    }
    let mut table: Vec<(Scenario, Stats)> =
        scenarios.iter().map(|&s| (s, Stats::default())).collect();
    for round in 0..options.rounds as usize {
        let n = scenarios.len();
        for i in 0..n {
            let index = (round + i) % n;
            let scenario = scenarios[index];
            let stats =
                run_scenario(scenario, options, server, pool, completed, options.seconds).await?;
            let cpu = stats.cpu_per_request().unwrap_or_default();
            eprintln!(
                "idem-bench: round {}/{} {:<15} {:>6.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  \
                 cpu µs/req {:>4.0} {:>4.0} {:>4.0}  server switches/req {:>5.1}  others {:>3.0}%{}",
                round + 1,
                options.rounds,
                scenario.name(),
                stats.rate(),
                stats.ms(0.5),
                stats.ms(0.99),
                cpu[0],
                cpu[1],
                cpu[2],
                stats.switches_per_request().unwrap_or_default(),
                stats.others_share(crate::server::workers()) * 100.0,
                if stats.errors > 0 {
                    format!("  {} errors", stats.errors)
                } else {
                    String::new()
                }
            );
            table[index].1.add_round(&stats);
        }
    }
    Ok(table)
}

async fn memory_part(
    options: &Options,
    server: &Server,
    completed: &Completed,
) -> Result<MemoryResults, String> {
    let pid = server.pid();
    let idle_kib = memory::read(pid).map_or(0, |m| m.rss_kib);
    let big = Arc::new(KeyLog::default());
    let loads: [(&'static str, HttpLoad); 4] = [
        (
            "idem",
            HttpLoad {
                path: "/idem/orders",
                mode: Mode::Fresh(Some(Arc::clone(&completed.idem))),
            },
        ),
        (
            "bare, 1 MiB responses",
            HttpLoad {
                path: "/bare-big/orders",
                mode: Mode::Fresh(None),
            },
        ),
        (
            "idem, 1 MiB responses",
            HttpLoad {
                path: "/idem-big/orders",
                mode: Mode::Fresh(Some(Arc::clone(&big))),
            },
        ),
        (
            "replay, 1 MiB responses",
            HttpLoad {
                path: "/idem-big/orders",
                mode: Mode::Replay(Arc::clone(&big)),
            },
        ),
    ];
    let mut reset_works = true;
    let mut rows = Vec::new();
    for (name, load) in loads {
        reset_works &= memory::reset_peak(pid);
        let stats = load::run(server.addr, &load, options.connections, options.seconds).await?;
        let peak = memory::read(pid).map_or(0, |m| m.peak_kib);
        eprintln!(
            "idem-bench: memory {name:<24} peak {:>7.1} MiB  {:>7.0} req/s",
            peak as f64 / 1024.0,
            stats.rate()
        );
        rows.push((name, stats, peak));
    }
    Ok(MemoryResults {
        idle_kib,
        rows,
        reset_works,
    })
}
