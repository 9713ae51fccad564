//! The load generator: keep-alive HTTP/1.1 connections at fixed concurrency, each
//! sending its next request as soon as the previous answer is read (a closed loop).
//!
//! All connections run on the parent's single thread: a hyper client needs a small
//! fraction of a core for this load, and every cycle it does not take is left to the
//! server and PostgreSQL, which share the machine with it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::orders::{ACCOUNT_HEADER, ORDER_BODY};
use crate::stats::Stats;

/// Duplicates sent at once for one key in the storm.
pub(crate) const STORM_DUPLICATES: usize = 20;

/// Keys that completed, kept so a replay scenario can send them again.
#[derive(Debug, Default)]
pub(crate) struct KeyLog {
    keys: Mutex<Vec<(u32, String)>>,
    next: AtomicUsize,
}

impl KeyLog {
    pub(crate) fn push(&self, account: u32, key: String) {
        self.keys.lock().expect("key log").push((account, key));
    }

    /// The next logged key, round robin.
    pub(crate) fn next(&self) -> Option<(u32, String)> {
        let keys = self.keys.lock().expect("key log");
        if keys.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % keys.len();
        Some(keys[i].clone())
    }
}

/// What requests a load sends and which answers it expects.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// A new key on every request; each must execute. Keys that did are logged, if a
    /// log is given.
    Fresh(Option<Arc<KeyLog>>),
    /// Keys from the log; each must replay.
    Replay(Arc<KeyLog>),
    /// Groups of [`STORM_DUPLICATES`] connections send one new key at the same moment;
    /// exactly one of them may execute, the others replay or get 409.
    Storm,
}

/// One HTTP load: an endpoint and a mode.
#[derive(Debug, Clone)]
pub(crate) struct HttpLoad {
    pub(crate) path: &'static str,
    pub(crate) mode: Mode,
}

/// A key as a client would generate it: 36 characters that look random (like a UUIDv4,
/// so keys land all over the index as real ones do), and never repeat in a process.
pub(crate) fn new_key() -> (u32, String) {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    key_for(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The key and account of number `n`. splitmix64 is a bijection, so distinct numbers
/// give distinct keys.
pub(crate) fn key_for(n: u64) -> (u32, String) {
    let a = splitmix64(n);
    let b = splitmix64(a);
    let key = format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 48,
        b & 0xffff_ffff_ffff
    );
    ((n % 1000) as u32 + 1, key)
}

pub(crate) fn splitmix64(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

type Sender = SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to the server at {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {addr} failed: {e}"))?;
    tokio::spawn(async move {
        // Ends when the sender is dropped; an I/O error shows up on the next request.
        let _ = connection.await;
    });
    Ok(sender)
}

/// The answer as far as a scenario cares.
struct Answer {
    status: StatusCode,
    replayed: bool,
}

async fn send(sender: &mut Sender, path: &str, account: u32, key: &str) -> Result<Answer, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = Request::post(path)
        .header(HOST, "127.0.0.1")
        .header(CONTENT_TYPE, "application/json")
        .header(ACCOUNT_HEADER, account)
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(ORDER_BODY)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    // Read every byte, frame by frame: the answer is not complete until then, and
    // nothing is gathered into one buffer on this side.
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        frame.map_err(|e| e.to_string())?;
    }
    Ok(Answer { status, replayed })
}

/// When a load stops: at a deadline, or after a number of requests (of waves, in a storm).
/// With `interval`, each connection sends on a schedule instead of as fast as it can.
#[derive(Debug, Clone)]
struct Budget {
    deadline: Option<Instant>,
    remaining: Option<Arc<AtomicU64>>,
    interval: Option<Duration>,
}

impl Budget {
    /// Whether one more request (or wave) may start; takes it from the budget.
    fn take(&self) -> bool {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return false;
        }
        match &self.remaining {
            Some(remaining) => remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            None => true,
        }
    }
}

/// Runs `load` on `connections` connections for `duration`, then waits for the answers
/// in flight. A storm uses whole groups of [`STORM_DUPLICATES`] connections instead.
pub(crate) async fn run(
    addr: SocketAddr,
    load: &HttpLoad,
    connections: usize,
    duration: Duration,
) -> Result<Stats, String> {
    run_with(addr, load, connections, Some(duration), None, None).await
}

/// Runs `load` for `duration` at `rate` requests per second in all, spread evenly over
/// `connections` (an open loop: each connection sends on its schedule whether or not the
/// server kept up). Latency is counted from the time a request was due, so an answer
/// that made later requests wait also counts against those.
pub(crate) async fn run_at_rate(
    addr: SocketAddr,
    load: &HttpLoad,
    connections: usize,
    duration: Duration,
    rate: f64,
) -> Result<Stats, String> {
    let interval = Duration::from_secs_f64(connections as f64 / rate.max(1.0));
    run_with(
        addr,
        load,
        connections,
        Some(duration),
        None,
        Some(interval),
    )
    .await
}

/// Runs `load` until `requests` were sent (waves, in a storm).
pub(crate) async fn run_count(
    addr: SocketAddr,
    load: &HttpLoad,
    connections: usize,
    requests: u64,
) -> Result<Stats, String> {
    run_with(addr, load, connections, None, Some(requests), None).await
}

async fn run_with(
    addr: SocketAddr,
    load: &HttpLoad,
    connections: usize,
    duration: Option<Duration>,
    requests: Option<u64>,
    interval: Option<Duration>,
) -> Result<Stats, String> {
    let connections = match load.mode {
        Mode::Storm => storm_groups(connections) * STORM_DUPLICATES,
        _ => connections,
    };
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(addr).await?);
    }
    // Connecting is not part of the measurement: the clock starts once all are open.
    let start = Instant::now();
    let budget = Budget {
        deadline: duration.map(|d| start + d),
        remaining: requests.map(|n| Arc::new(AtomicU64::new(n))),
        interval,
    };
    let mut tasks = JoinSet::new();
    match &load.mode {
        Mode::Storm => {
            let mut senders = senders.into_iter();
            for _ in 0..connections / STORM_DUPLICATES {
                let shared = Arc::new(StormGroup {
                    barrier: Barrier::new(STORM_DUPLICATES),
                    stop: AtomicBool::new(false),
                    // Each group numbers its keys from its own range of the counter.
                    first_key: storm_key_base(),
                });
                for sender in senders.by_ref().take(STORM_DUPLICATES) {
                    tasks.spawn(storm_connection(
                        sender,
                        load.path,
                        Arc::clone(&shared),
                        budget.clone(),
                    ));
                }
            }
        }
        mode => {
            for (i, sender) in senders.into_iter().enumerate() {
                // Scheduled connections start staggered, so requests arrive evenly.
                let first =
                    start + budget.interval.unwrap_or_default() * i as u32 / connections as u32;
                tasks.spawn(connection(
                    sender,
                    load.path,
                    mode.clone(),
                    budget.clone(),
                    first,
                ));
            }
        }
    }
    let mut stats = Stats::default();
    while let Some(result) = tasks.join_next().await {
        let part = result.map_err(|e| format!("a load task failed: {e}"))?;
        stats.absorb(&part);
    }
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// Whole groups of duplicates: as many as fit the connection count, at least one.
pub(crate) fn storm_groups(connections: usize) -> usize {
    (connections / STORM_DUPLICATES).max(1)
}

async fn connection(
    mut sender: Sender,
    path: &'static str,
    mode: Mode,
    budget: Budget,
    first: Instant,
) -> Stats {
    let mut stats = Stats::default();
    let mut due = first;
    while budget.take() {
        let (account, key) = match &mode {
            Mode::Replay(log) => match log.next() {
                Some(entry) => entry,
                None => {
                    stats.error(|| "no completed keys to replay".to_owned());
                    break;
                }
            },
            _ => new_key(),
        };
        let started = match budget.interval {
            Some(interval) => {
                tokio::time::sleep_until(due.into()).await;
                let scheduled = due;
                due += interval;
                scheduled
            }
            None => Instant::now(),
        };
        let answer = send(&mut sender, path, account, &key).await;
        stats.record(started.elapsed());
        match (answer, &mode) {
            (Err(error), _) => {
                stats.error(|| error);
                // The connection is likely gone; a new one keeps the load's shape.
                return stats;
            }
            (Ok(a), Mode::Fresh(log)) if a.status == StatusCode::CREATED && !a.replayed => {
                stats.ok += 1;
                stats.executed += 1;
                if let Some(log) = log {
                    log.push(account, key);
                }
            }
            (Ok(a), Mode::Replay(_)) if a.status == StatusCode::CREATED && a.replayed => {
                stats.ok += 1;
                stats.replayed += 1;
            }
            (Ok(a), Mode::Fresh(_)) if a.status == StatusCode::SERVICE_UNAVAILABLE => {
                stats.busy += 1;
            }
            (Ok(a), _) => {
                stats.error(|| {
                    format!("{path}: unexpected {} (replayed: {})", a.status, a.replayed)
                });
            }
        }
    }
    stats
}

struct StormGroup {
    barrier: Barrier,
    stop: AtomicBool,
    first_key: u64,
}

/// A range of 2^24 key numbers of its own (far above the counter of `new_key`).
fn storm_key_base() -> u64 {
    static BASE: AtomicU64 = AtomicU64::new(1 << 40);
    BASE.fetch_add(1 << 24, Ordering::Relaxed)
}

async fn storm_connection(
    mut sender: Sender,
    path: &'static str,
    group: Arc<StormGroup>,
    budget: Budget,
) -> Stats {
    let mut stats = Stats::default();
    let mut wave = 0u64;
    loop {
        // Everyone decides together whether to go on: one member looks at the clock,
        // all read its decision after the second barrier. Deciding separately could
        // leave some members waiting at a barrier the others never reach.
        if group.barrier.wait().await.is_leader() {
            group.stop.store(!budget.take(), Ordering::Relaxed);
        }
        group.barrier.wait().await;
        if group.stop.load(Ordering::Relaxed) {
            return stats;
        }
        let (account, key) = key_for(group.first_key + wave);
        wave += 1;
        let started = Instant::now();
        let answer = send(&mut sender, path, account, &key).await;
        stats.record(started.elapsed());
        match answer {
            Ok(a) if a.status == StatusCode::CREATED && !a.replayed => {
                stats.ok += 1;
                stats.executed += 1;
            }
            Ok(a) if a.status == StatusCode::CREATED => {
                stats.ok += 1;
                stats.replayed += 1;
            }
            Ok(a) if a.status == StatusCode::CONFLICT => {
                stats.ok += 1;
                stats.conflicts += 1;
            }
            Ok(a) => stats.error(|| format!("{path}: unexpected {} in the storm", a.status)),
            Err(error) => stats.error(|| error),
        }
        // A member that failed keeps meeting the barrier, so the group is never stuck.
    }
}
