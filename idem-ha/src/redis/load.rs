//! The keyed requests, the fake provider they call, and the checker's retry of every key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_runtime::redis::{Attempt, RedisClaim, RedisRequest, RedisStore, RedisStoreError};
use redis::cluster_async::ClusterConnection;

/// Every request's scope: one account, so keys only differ by their `Idempotency-Key`.
const SCOPE: &str = "acct";
/// Short, so that a request cut off by the kill is taken over soon by its retry.
const LEASE: Duration = Duration::from_secs(1);
const RETENTION: Duration = Duration::from_secs(3600);
/// How long `WAIT` waits for the replica before the completion counts as unconfirmed.
const WAIT_TIMEOUT: Duration = Duration::from_millis(500);
/// A key that does not complete within this is given up (a violation).
const GIVE_UP: Duration = Duration::from_secs(90);
/// Between retries after an error (the server down, a failover under way).
const BACKOFF: Duration = Duration::from_millis(50);

/// The store on a single node or on a cluster, and whether an answer waits for a replica
/// (`WAIT 1` on the key's master) before it counts as acknowledged.
#[derive(Clone)]
pub(crate) enum Store {
    Single(RedisStore),
    Cluster {
        store: RedisStore<ClusterConnection>,
        wait: bool,
    },
}

/// Runs one store call on whichever connection the store has.
macro_rules! on_store {
    ($store:expr, |$s:ident| $call:expr) => {
        match $store {
            Store::Single($s) => $call,
            Store::Cluster { store: $s, .. } => $call,
        }
    };
}

impl Store {
    async fn claim(&self, req: &RedisRequest<'_>) -> Result<RedisClaim, RedisStoreError> {
        on_store!(self, |s| s.claim(req).await)
    }

    async fn take_over(
        &self,
        req: &RedisRequest<'_>,
        seen: i64,
    ) -> Result<Option<Attempt>, RedisStoreError> {
        on_store!(self, |s| s.take_over(req, seen).await)
    }

    async fn record_phase(&self, a: &Attempt, output: &str) -> Result<bool, RedisStoreError> {
        on_store!(self, |s| s.record_phase(a, "send", output).await)
    }

    async fn complete(&self, a: &Attempt, body: &[u8]) -> Result<bool, RedisStoreError> {
        on_store!(self, |s| s.complete(a, 201, b"", body).await)
    }

    /// Whether the key's answer is on a replica (always, when the run does not wait).
    async fn confirmed(&self, key: &str, stats: &Stats) -> Result<bool, RedisStoreError> {
        match self {
            Store::Cluster { store, wait: true } => {
                let acked = store
                    .wait_for_replicas_of(SCOPE, key, 1, WAIT_TIMEOUT)
                    .await?;
                if acked == 0 {
                    stats.wait_short.fetch_add(1, Ordering::Relaxed);
                }
                Ok(acked >= 1)
            }
            _ => Ok(true),
        }
    }
}

/// The outside provider: every call is counted (raw), and its effect is made once per
/// derived key (`{key}:send`), as a provider that deduplicates by idempotency key does.
#[derive(Debug, Default)]
pub(crate) struct Provider {
    state: Mutex<ProviderState>,
}

#[derive(Debug, Default)]
struct ProviderState {
    /// Per client key, the generation of every call made for it.
    calls: HashMap<String, Vec<i64>>,
    /// Per derived key, the effect's id.
    effects: HashMap<String, String>,
    /// Effects made: one per derived key, unless the dedupe failed.
    made: u64,
}

impl Provider {
    /// Sends the message of `key`'s operation; the same derived key answers the first
    /// effect's id again.
    fn send(&self, key: &str, generation: i64) -> String {
        let mut st = self.state.lock().unwrap();
        st.calls.entry(key.to_owned()).or_default().push(generation);
        let derived = format!("{key}:send");
        if let Some(id) = st.effects.get(&derived) {
            return id.clone();
        }
        st.made += 1;
        let id = format!("msg-{}", st.made);
        st.effects.insert(derived, id.clone());
        id
    }

    pub(crate) fn figures(&self) -> ProviderFigures {
        let st = self.state.lock().unwrap();
        let calls = st.calls.values().map(|c| c.len() as u64).sum();
        let twice_raw = st.calls.values().filter(|c| c.len() > 1).count() as u64;
        let twice_by_generation = st
            .calls
            .values()
            .filter(|c| {
                let mut g = (*c).clone();
                g.sort_unstable();
                g.dedup();
                g.len() > 1
            })
            .count() as u64;
        ProviderFigures {
            calls,
            effects: st.made,
            twice_raw,
            twice_deduped: st.made.saturating_sub(st.effects.len() as u64),
            twice_by_generation,
        }
    }
}

/// What the provider saw.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProviderFigures {
    /// Calls, raw.
    pub(crate) calls: u64,
    /// Effects made after the dedupe by derived key.
    pub(crate) effects: u64,
    /// Keys whose effect the provider was asked for more than once.
    pub(crate) twice_raw: u64,
    /// Effects made twice despite the dedupe by `{key}:send`.
    pub(crate) twice_deduped: u64,
    /// Keys called under two generations: effects made twice had the derived key hashed
    /// the key's generation (as the phased form's derived keys do).
    pub(crate) twice_by_generation: u64,
}

/// Counters over every store call of a run.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) calls: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) takeovers: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) wait_short: AtomicU64,
}

/// Everything a run's clients and checker share.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) provider: Provider,
    pub(crate) stats: Stats,
    pub(crate) stop: AtomicBool,
}

/// How a key's request ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) body: Vec<u8>,
    /// The first claim found the key completed.
    pub(crate) replayed: bool,
    /// When it was acknowledged.
    pub(crate) at: Instant,
    /// From the first send to the acknowledgement, retries included.
    pub(crate) waited: Duration,
}

/// One request with `key`, retried as a client would (after errors, while in flight,
/// after a takeover lost or a fenced write) until it is acknowledged: completed, or
/// replayed, and with `WAIT` confirmed on a replica.
pub(crate) async fn drive(shared: &Shared, key: &str) -> Result<Outcome, String> {
    let req = RedisRequest {
        scope: SCOPE,
        key,
        fingerprint: [7; 32],
        method: "POST",
        path: "/notifications",
        lease: LEASE,
        retention: RETENTION,
    };
    let started = Instant::now();
    let mut first = true;
    let mut last_error = String::new();
    loop {
        if started.elapsed() > GIVE_UP {
            return Err(format!("not acknowledged within {GIVE_UP:?}: {last_error}"));
        }
        let was_first = std::mem::replace(&mut first, false);
        match attempt(shared, &req).await {
            Ok(Some((body, replay))) => {
                return Ok(Outcome {
                    body,
                    replayed: replay && was_first,
                    at: Instant::now(),
                    waited: started.elapsed(),
                });
            }
            Ok(None) => {}
            Err(e) => {
                shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                last_error = e.to_string();
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// One try: `Some((body, replayed))` when acknowledged, `None` to try again.
async fn attempt(
    shared: &Shared,
    req: &RedisRequest<'_>,
) -> Result<Option<(Vec<u8>, bool)>, RedisStoreError> {
    let stats = &shared.stats;
    let store = &shared.store;
    stats.calls.fetch_add(1, Ordering::Relaxed);
    let attempt = match store.claim(req).await? {
        RedisClaim::Claimed(a) => a,
        RedisClaim::Completed(answer) => {
            if store.confirmed(req.key, stats).await? {
                return Ok(Some((answer.body.to_vec(), true)));
            }
            return Ok(None);
        }
        RedisClaim::InFlight { retry_after } => {
            tokio::time::sleep(retry_after.min(Duration::from_millis(100))).await;
            return Ok(None);
        }
        RedisClaim::LeaseEnded { fencing_token } => {
            stats.calls.fetch_add(1, Ordering::Relaxed);
            match store.take_over(req, fencing_token).await? {
                Some(a) => {
                    stats.takeovers.fetch_add(1, Ordering::Relaxed);
                    a
                }
                None => return Ok(None),
            }
        }
        RedisClaim::Mismatch { method, path } => {
            panic!(
                "{}: mismatch with {method} {path}: one body per key",
                req.key
            )
        }
    };
    let output = match attempt.recorded.iter().find(|(phase, _)| phase == "send") {
        Some((_, output)) => output.clone(),
        None => {
            let output = shared.provider.send(req.key, attempt.generation);
            stats.calls.fetch_add(1, Ordering::Relaxed);
            if !store.record_phase(&attempt, &output).await? {
                stats.fenced.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            output
        }
    };
    let body = format!("{{\"message\":\"{output}\"}}").into_bytes();
    stats.calls.fetch_add(1, Ordering::Relaxed);
    if !store.complete(&attempt, &body).await? {
        stats.fenced.fetch_add(1, Ordering::Relaxed);
        return Ok(None);
    }
    if store.confirmed(req.key, stats).await? {
        Ok(Some((body, false)))
    } else {
        Ok(None)
    }
}

/// What one client sent and saw acknowledged.
#[derive(Debug, Default)]
pub(crate) struct ClientLog {
    pub(crate) sent: Vec<String>,
    pub(crate) acked: HashMap<String, Outcome>,
    pub(crate) given_up: Vec<(String, String)>,
}

/// A client: one key after another until the run stops; the key in hand is finished.
pub(crate) async fn client(shared: Arc<Shared>, prefix: String) -> ClientLog {
    let mut log = ClientLog::default();
    let mut n = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("{prefix}-{n}");
        log.sent.push(key.clone());
        match drive(&shared, &key).await {
            Ok(outcome) => {
                log.acked.insert(key, outcome);
            }
            Err(e) => log.given_up.push((key, e)),
        }
    }
    log
}

/// What the checker found for one client's keys.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Acknowledged, then not completed when sent again (gone, or in progress).
    pub(crate) lost: Vec<String>,
    /// Of them, acknowledged before the kill.
    pub(crate) lost_acked_before_kill: u64,
    /// Replayed with another answer than the acknowledged one.
    pub(crate) changed: Vec<String>,
    /// Could not be completed by the checker.
    pub(crate) failed: Vec<(String, String)>,
}

/// Sends every key of `log` once more: an acknowledged key must replay the answer its
/// client got.
pub(crate) async fn check(shared: Arc<Shared>, log: Arc<ClientLog>, kill: Instant) -> Checked {
    let mut checked = Checked::default();
    for key in &log.sent {
        match drive(&shared, key).await {
            Ok(outcome) => {
                if let Some(acked) = log.acked.get(key) {
                    if !outcome.replayed {
                        checked.lost.push(key.clone());
                        if acked.at < kill {
                            checked.lost_acked_before_kill += 1;
                        }
                    } else if outcome.body != acked.body {
                        checked.changed.push(key.clone());
                    }
                }
            }
            Err(e) => checked.failed.push((key.clone(), e)),
        }
    }
    checked
}
