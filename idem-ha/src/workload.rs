//! The example processes and the clients that load them.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::Extensions;
use idem_client::{ExponentialBackoff, IdempotencyMiddleware, Jitter};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Which endpoint an operation calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `POST /orders`, idem's single-transaction form.
    Order,
    /// `POST /payments`, the phased form, whose receipt the outbox relay delivers.
    Payment,
}

/// An operation a client saw acknowledged.
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    pub(crate) kind: Kind,
    pub(crate) account: i64,
    pub(crate) key: String,
    /// Unique per account for payments: how the checker finds the payment row.
    pub(crate) amount: i64,
    body_sent: String,
    instance: usize,
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Acked {
    /// The order or payment id the answer names.
    pub(crate) fn id(&self) -> Option<i64> {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()?
            .get("id")?
            .as_i64()
    }
}

/// Every attempt's outcome, as the clients' middleware chain saw it.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// (sent, answered, status; 0 for a connection error or timeout)
    attempts: Mutex<Vec<(Instant, Instant, u16)>>,
    given_up: AtomicU64,
}

impl Stats {
    pub(crate) fn given_up(&self) -> u64 {
        self.given_up.load(Ordering::Relaxed)
    }

    fn counts(attempts: &[(Instant, Instant, u16)]) -> String {
        let mut by: std::collections::BTreeMap<String, u64> = Default::default();
        for &(_, _, status) in attempts {
            let name = if status == 0 {
                "connection error/timeout".to_owned()
            } else {
                status.to_string()
            };
            *by.entry(name).or_default() += 1;
        }
        let parts: Vec<String> = by.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("{} ({})", attempts.len(), parts.join(", "))
    }

    /// Attempts by outcome over the whole run.
    pub(crate) fn summary(&self) -> String {
        Self::counts(&self.attempts.lock().unwrap())
    }

    /// Attempts answered between `from` and `to`, by outcome.
    pub(crate) fn counts_between(&self, from: Instant, to: Instant) -> String {
        let attempts = self.attempts.lock().unwrap();
        let within: Vec<_> = attempts
            .iter()
            .copied()
            .filter(|&(_, answered, _)| answered >= from && answered <= to)
            .collect();
        format!(
            "answers until 2s after the rejoin: {}",
            Self::counts(&within)
        )
    }

    /// The longest time between two consecutive 2xx answers from `from` to `to` (a
    /// stretch in which no operation completed), and when it ended.
    pub(crate) fn longest_stall(&self, from: Instant, to: Instant) -> (Duration, Instant) {
        let attempts = self.attempts.lock().unwrap();
        let mut ok: Vec<Instant> = attempts
            .iter()
            .filter(|&&(_, answered, status)| {
                (200..300).contains(&status) && answered >= from && answered <= to
            })
            .map(|&(_, answered, _)| answered)
            .collect();
        ok.sort();
        let mut previous = from;
        let mut longest = (Duration::ZERO, from);
        for at in ok.into_iter().chain(std::iter::once(to)) {
            if at.duration_since(previous) > longest.0 {
                longest = (at.duration_since(previous), at);
            }
            previous = at;
        }
        longest
    }

    /// When the first 2xx answered an attempt sent after `at`.
    pub(crate) fn first_success_sent_after(&self, at: Instant) -> Option<Instant> {
        let attempts = self.attempts.lock().unwrap();
        attempts
            .iter()
            .filter(|&&(sent, _, status)| sent > at && (200..300).contains(&status))
            .map(|&(_, answered, _)| answered)
            .min()
    }
}

/// Records each attempt; sits after the idempotency middleware, so it sees every retry.
struct Recorder(Arc<Stats>);

#[async_trait]
impl Middleware for Recorder {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let sent = Instant::now();
        let result = next.run(req, extensions).await;
        let status = result.as_ref().map_or(0, |r| r.status().as_u16());
        self.0
            .attempts
            .lock()
            .unwrap()
            .push((sent, Instant::now(), status));
        result
    }
}

/// The SDK-like client: retries with backoff (100 ms doubling to 2 s, jitter) long enough
/// to outlast a failover, and a per-attempt timeout.
fn client(stats: Option<Arc<Stats>>) -> ClientWithMiddleware {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(100), Duration::from_secs(2))
        .jitter(Jitter::Bounded)
        .build_with_max_retries(200);
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("reqwest client");
    let builder = ClientBuilder::new(inner).with(IdempotencyMiddleware::with_policy(policy));
    match stats {
        Some(stats) => builder.with(Recorder(stats)).build(),
        None => builder.build(),
    }
}

/// The example processes, all on the same database URL.
#[derive(Debug)]
pub(crate) struct Services {
    children: Vec<Child>,
    pub(crate) addrs: Vec<String>,
}

impl Services {
    /// Starts `n` example processes on free ports and waits until each serves.
    pub(crate) async fn start(server: &Path, url: &str, n: usize) -> Result<Services, String> {
        let mut services = Services {
            children: Vec::new(),
            addrs: Vec::new(),
        };
        for _ in 0..n {
            let port = idem_testkit::free_port()?;
            let addr = format!("127.0.0.1:{port}");
            let mut child = Command::new(server)
                .env("DATABASE_URL", url)
                .env("BIND_ADDR", &addr)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", server.display()))?;
            let stdout = child.stdout.take().expect("piped");
            let mut lines = BufReader::new(stdout).lines();
            let serving = tokio::time::timeout(Duration::from_secs(60), async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with("orders: serving on") {
                        return true;
                    }
                }
                false
            })
            .await;
            if serving != Ok(true) {
                return Err(format!("the example on {addr} did not start serving"));
            }
            // Keep reading, so the process never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            services.children.push(child);
            services.addrs.push(addr);
        }
        Ok(services)
    }

    pub(crate) async fn stop(mut self) {
        for child in &mut self.children {
            let _ = child.kill().await;
        }
    }

    /// Sends an acknowledged operation again with its key: (status, body, replayed).
    pub(crate) async fn replay(&self, op: &Acked) -> Result<(u16, Vec<u8>, bool), String> {
        let response = send(
            &client(None),
            &self.addrs[op.instance],
            op.kind,
            op.account,
            &op.key,
            &op.body_sent,
        )
        .await?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, body.to_vec(), replayed))
    }
}

async fn send(
    client: &ClientWithMiddleware,
    addr: &str,
    kind: Kind,
    account: i64,
    key: &str,
    body: &str,
) -> Result<reqwest::Response, String> {
    let path = match kind {
        Kind::Order => "orders",
        Kind::Payment => "payments",
    };
    client
        .post(format!("http://{addr}/{path}"))
        .header("content-type", "application/json")
        .header("x-account-id", account.to_string())
        .header("idempotency-key", key)
        .body(body.to_owned())
        .send()
        .await
        .map_err(|e| e.to_string())
}

/// The clients while they run.
pub(crate) struct Run {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Acked>>>,
}

impl Run {
    /// Starts `clients` clients, client `c` as account `c + 1`, each sending one operation
    /// at a time (every fourth a payment) to the processes in turn.
    pub(crate) fn start(services: &Services, clients: usize, stats: Arc<Stats>) -> Run {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|c| {
                let stop = stop.clone();
                let stats = stats.clone();
                let addrs = services.addrs.clone();
                tokio::spawn(async move {
                    let client = client(Some(stats.clone()));
                    let account = c as i64 + 1;
                    let mut acked = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let kind = if n.is_multiple_of(4) {
                            Kind::Payment
                        } else {
                            Kind::Order
                        };
                        let key = format!("op-{account}-{n}");
                        let amount = n as i64 + 1;
                        let body = match kind {
                            Kind::Order => serde_json::json!({
                                "item": key, "quantity": 1, "amount_cents": amount
                            }),
                            Kind::Payment => {
                                serde_json::json!({"amount_cents": amount, "currency": "EUR"})
                            }
                        }
                        .to_string();
                        let instance = (c + n as usize) % addrs.len();
                        let result =
                            send(&client, &addrs[instance], kind, account, &key, &body).await;
                        let response = match result {
                            Ok(r) if r.status().as_u16() == 201 => r,
                            _ => {
                                stats.given_up.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        };
                        let status = response.status().as_u16();
                        let Ok(bytes) = response.bytes().await else {
                            stats.given_up.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        acked.push(Acked {
                            kind,
                            account,
                            key,
                            amount,
                            body_sent: body,
                            instance,
                            status,
                            body: bytes.to_vec(),
                        });
                    }
                    acked
                })
            })
            .collect();
        Run { stop, tasks }
    }

    /// Lets each client finish its operation in flight, then returns what was acknowledged.
    pub(crate) async fn stop(self) -> Vec<Acked> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for task in self.tasks {
            all.extend(task.await.unwrap_or_default());
        }
        all
    }
}
