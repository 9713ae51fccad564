//! The clients: what they send, and the record of every attempt and its answer.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Accounts the keys are spread over (keys are scoped by account).
const ACCOUNTS: i64 = 4;
/// How many of the latest keys count as recent when a key is reused.
const CLIENTS_RECENT: usize = 16;
/// Amounts over this are declined with 402, an outcome stored like a 201.
const CARD_LIMIT_CENTS: i64 = 1_000_000;
/// The share of new operations that are payments (the phased form); the others are orders.
const PAYMENT_SHARE: f32 = 0.25;
/// The first payment amount. Every payment body gets an amount of its own, counted up
/// from here, so each payment and provider charge row names its key and body.
const FIRST_PAYMENT_CENTS: i64 = 1_000;

/// Which of the example's two forms an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `POST /orders`: the single-transaction form.
    Order,
    /// `POST /payments`: the phased form, which calls the provider with a derived key.
    Payment,
}

/// One logical operation: a key of an account, its path and the bodies sent with it.
/// `bodies[0]` is the operation's own body; later ones are mismatches (same key, another
/// body), which must never take effect once the key has an outcome.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub(crate) form: Form,
    pub(crate) account: i64,
    pub(crate) key: String,
    pub(crate) path: String,
    pub(crate) bodies: Vec<String>,
}

/// What one request got.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Answer {
        status: u16,
        replayed: bool,
        body: Vec<u8>,
    },
    /// The client gave up waiting (its own timeout).
    Timeout,
    /// No answer: connection refused or reset.
    Failed,
}

/// One request of an operation, with one of its bodies.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) op: usize,
    pub(crate) body: usize,
    pub(crate) outcome: Outcome,
}

/// Why a request was sent.
#[derive(Debug, Clone, Copy)]
enum Kind {
    New,
    Reuse,
    Mismatch,
    Retry,
}

/// Shared by the clients: the operations, the attempts and the budget.
#[derive(Debug)]
pub(crate) struct Load {
    seed: u64,
    budget: u64,
    deadline: Instant,
    bases: Vec<String>,
    sent: AtomicU64,
    counts: [AtomicU64; 4],
    next_amount: AtomicI64,
    ops: Mutex<Vec<Op>>,
    attempts: Mutex<Vec<Attempt>>,
}

/// Locks a mutex even if a panicking client poisoned it: the records stay readable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The answer to a request, taken apart; `None` when no answer came.
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Outcome {
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let replayed = response
                .headers()
                .get("idempotent-replayed")
                .is_some_and(|v| v == "true");
            match response.bytes().await {
                Ok(body) => Outcome::Answer {
                    status,
                    replayed,
                    body: body.to_vec(),
                },
                Err(error) if error.is_timeout() => Outcome::Timeout,
                Err(_) => Outcome::Failed,
            }
        }
        Err(error) if error.is_timeout() => Outcome::Timeout,
        Err(_) => Outcome::Failed,
    }
}

/// `POST {base}{path}` for `op` with its body number `body`.
pub(crate) fn request(
    http: &reqwest::Client,
    base: &str,
    op: &Op,
    body: usize,
    timeout: Duration,
) -> reqwest::RequestBuilder {
    http.post(format!("{base}{}", op.path))
        .timeout(timeout)
        .header("x-account-id", op.account.to_string())
        .header("idempotency-key", &op.key)
        .header("content-type", "application/json")
        .body(op.bodies[body].clone())
}

/// Whether the client stops retrying at this answer: anything but 409 and 5xx.
pub(crate) fn is_final(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Answer { status, .. } if *status != 409 && *status < 500)
}

impl Load {
    pub(crate) fn new(seed: u64, budget: u64, deadline: Instant, bases: Vec<String>) -> Arc<Self> {
        Arc::new(Self {
            seed,
            budget,
            deadline,
            bases,
            sent: AtomicU64::new(0),
            counts: Default::default(),
            next_amount: AtomicI64::new(FIRST_PAYMENT_CENTS),
            ops: Mutex::new(Vec::new()),
            attempts: Mutex::new(Vec::new()),
        })
    }

    /// Takes one request from the budget; false when the run is over.
    fn may_send(&self) -> bool {
        Instant::now() < self.deadline && self.sent.fetch_add(1, Ordering::Relaxed) < self.budget
    }

    pub(crate) fn ops(&self) -> Vec<Op> {
        lock(&self.ops).clone()
    }

    pub(crate) fn attempts(&self) -> Vec<Attempt> {
        lock(&self.attempts).clone()
    }

    /// Records an attempt made outside the clients (by the checker).
    pub(crate) fn record(&self, attempt: Attempt) {
        lock(&self.attempts).push(attempt);
    }

    /// One client: picks an operation, sends it until it has a final answer or the client
    /// gives up on it, and again, until the time or the request budget runs out.
    pub(crate) async fn client(self: Arc<Self>, client: usize) {
        let mut rng = fastrand::Rng::with_seed(self.seed.wrapping_add(client as u64));
        // No idle connections kept: a killed process leaves dead ones behind, and real
        // clients of a fleet reconnect often anyway.
        let http = match reqwest::Client::builder().pool_max_idle_per_host(0).build() {
            Ok(http) => http,
            Err(_) => return,
        };
        let mut made = 0;
        loop {
            let (op, body, kind) = self.pick(&mut rng, client, &mut made);
            let mut kind = kind;
            loop {
                if !self.may_send() {
                    return;
                }
                self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
                let base = &self.bases[rng.usize(..self.bases.len())];
                // Some requests wait less than a slow request takes: the client hangs up.
                let timeout = if rng.f32() < 0.15 {
                    Duration::from_millis(rng.u64(50..300))
                } else {
                    Duration::from_secs(10)
                };
                let outcome = send(request(&http, base, &op.1, body, timeout)).await;
                let done = is_final(&outcome);
                self.record(Attempt {
                    op: op.0,
                    body,
                    outcome,
                });
                // A client gives up on an operation now and then (the checker retries it).
                if done || rng.f32() < 0.1 {
                    break;
                }
                kind = Kind::Retry;
                tokio::time::sleep(Duration::from_millis(rng.u64(20..300))).await;
            }
        }
    }

    /// A new operation, or one already sent (by any client) with its own body or,
    /// rarely, with another body.
    fn pick(
        &self,
        rng: &mut fastrand::Rng,
        client: usize,
        made: &mut usize,
    ) -> ((usize, Op), usize, Kind) {
        let mut ops = lock(&self.ops);
        if !ops.is_empty() && rng.f32() < 0.25 {
            // Half the reuses pick one of the latest keys, likely still in flight at
            // another client: concurrent duplicates, across instances.
            let index = if rng.bool() {
                rng.usize(ops.len().saturating_sub(CLIENTS_RECENT)..ops.len())
            } else {
                rng.usize(..ops.len())
            };
            if rng.f32() < 0.2 {
                let op = &mut ops[index];
                let other = match op.form {
                    // Same item (the key), another quantity: a different request body.
                    Form::Order => {
                        let quantity = 10 + op.bodies.len();
                        order_body(&op.key, quantity, rng.i64(100..10_000))
                    }
                    Form::Payment => payment_body(self.payment_amount()),
                };
                op.bodies.push(other);
                let body = op.bodies.len() - 1;
                return ((index, op.clone()), body, Kind::Mismatch);
            }
            return ((index, ops[index].clone()), 0, Kind::Reuse);
        }
        let key = format!("soak-{client}-{made}");
        *made += 1;
        if rng.f32() < PAYMENT_SHARE {
            let op = Op {
                form: Form::Payment,
                account: rng.i64(1..=ACCOUNTS),
                bodies: vec![payment_body(self.payment_amount())],
                key,
                path: "/payments".to_owned(),
            };
            ops.push(op.clone());
            return ((ops.len() - 1, op), 0, Kind::New);
        }
        let amount = if rng.f32() < 0.1 {
            2 * CARD_LIMIT_CENTS
        } else {
            rng.i64(100..10_000)
        };
        let path = if rng.f32() < 0.25 {
            format!("/orders?delay_ms={}", rng.u64(50..1500))
        } else {
            "/orders".to_owned()
        };
        let op = Op {
            form: Form::Order,
            account: rng.i64(1..=ACCOUNTS),
            bodies: vec![order_body(&key, rng.usize(1..=5), amount)],
            key,
            path,
        };
        ops.push(op.clone());
        ((ops.len() - 1, op), 0, Kind::New)
    }

    /// An amount no other payment body has.
    fn payment_amount(&self) -> i64 {
        self.next_amount.fetch_add(1, Ordering::Relaxed)
    }

    /// What was sent, for the report.
    pub(crate) fn summary(&self) -> Summary {
        let attempts = lock(&self.attempts);
        let ops = lock(&self.ops);
        let mut summary = Summary {
            ops: ops.len(),
            payment_ops: ops.iter().filter(|op| op.form == Form::Payment).count(),
            new: self.counts[Kind::New as usize].load(Ordering::Relaxed),
            reuse: self.counts[Kind::Reuse as usize].load(Ordering::Relaxed),
            mismatch: self.counts[Kind::Mismatch as usize].load(Ordering::Relaxed),
            retry: self.counts[Kind::Retry as usize].load(Ordering::Relaxed),
            ..Summary::default()
        };
        for attempt in attempts.iter() {
            summary.requests += 1;
            if ops[attempt.op].form == Form::Payment {
                summary.payment_requests += 1;
                match &attempt.outcome {
                    Outcome::Answer { replayed: true, .. } => summary.payments_replayed += 1,
                    Outcome::Answer {
                        status: 200..=299, ..
                    } => summary.payments_created += 1,
                    _ => {}
                }
            }
            match &attempt.outcome {
                Outcome::Answer {
                    status, replayed, ..
                } => match (status, replayed) {
                    (_, true) => summary.replayed += 1,
                    (200..=299, false) => summary.created += 1,
                    (402, false) => summary.declined += 1,
                    (409, _) => summary.in_progress += 1,
                    (422, _) => summary.mismatched += 1,
                    (500.., _) => summary.server_errors += 1,
                    _ => summary.other += 1,
                },
                Outcome::Timeout => summary.timeouts += 1,
                Outcome::Failed => summary.failed += 1,
            }
        }
        summary
    }
}

/// An order body in compact form; the item is the key, so a row names its key.
fn order_body(key: &str, quantity: usize, amount_cents: i64) -> String {
    serde_json::json!({ "item": key, "quantity": quantity, "amount_cents": amount_cents })
        .to_string()
}

/// A payment body; the amount is the body's own (see [`FIRST_PAYMENT_CENTS`]).
fn payment_body(amount_cents: i64) -> String {
    serde_json::json!({ "amount_cents": amount_cents, "currency": "EUR" }).to_string()
}

/// Counts of what the clients sent and got (the checker's retries included, when taken
/// after it ran).
#[derive(Debug, Default)]
pub(crate) struct Summary {
    ops: usize,
    payment_ops: usize,
    payment_requests: u64,
    payments_created: u64,
    payments_replayed: u64,
    requests: u64,
    new: u64,
    reuse: u64,
    mismatch: u64,
    retry: u64,
    created: u64,
    declined: u64,
    replayed: u64,
    in_progress: u64,
    mismatched: u64,
    server_errors: u64,
    other: u64,
    timeouts: u64,
    failed: u64,
}

impl Summary {
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} requests for {} keys ({} first sends, {} reuses of a key, {} with another \
             body, {} retries); answers: {} created, {} declined (402), {} replayed, {} 409, \
             {} 422, {} 5xx, {} other; {} client timeouts, {} without an answer; of them \
             payments: {} requests for {} keys, {} created, {} replayed",
            self.requests,
            self.ops,
            self.new,
            self.reuse,
            self.mismatch,
            self.retry,
            self.created,
            self.declined,
            self.replayed,
            self.in_progress,
            self.mismatched,
            self.server_errors,
            self.other,
            self.timeouts,
            self.failed,
            self.payment_requests,
            self.payment_ops,
            self.payments_created,
            self.payments_replayed
        )
    }
}
