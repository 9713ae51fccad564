//! Model-based test of the phased form: proptest generates sequences of requests,
//! concurrent duplicates, handler outcomes (2xx, a stored 4xx, 5xx, panic), process
//! deaths at each phase boundary, lease and retention expiry, expiry sweeps, relay runs
//! and relay deaths, and drives the real runtime through them on both databases. After
//! every step the database and the answers are checked against a reference model:
//!
//! - each committed phase ran at most once per operation (an operation is a key from its
//!   first use until it completes, whatever attempts and retentions it passes through);
//! - an operation's derived keys never change, and a new operation gets new ones;
//! - a replay is byte-identical to the operation's original answer, for its own scope;
//! - a different body under a live key is a 422, a completed key within its retention
//!   replays, and the sweep never deletes a key in progress;
//! - no outbox message is delivered twice at the same time, and every one is delivered.
//!
//! Time moves by rewriting the rows' time columns, never by sleeping. A failing sequence
//! shrinks to a short readable list of steps, printed with the failure; it then belongs
//! in the regression tests at the end of this file, as the ones there came to be.
//! `IDEM_MODEL_CASES` sets the number of sequences per database (default 24).

mod support;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::future::{Either, join_all, select};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde::Deserialize;
use sqlx::{AssertSqlSafe, Pool};
use support::app::Account;
use support::{Env, Reply, TestApp, TestBackend};
use tokio::sync::Notify;

/// The scopes the requests come from: two accounts sharing key names.
const SCOPES: [i64; 2] = [support::ALICE, support::BOB];

/// How a handler attempt behaves; sent in a header, so it is not part of the request's
/// fingerprint and a retry of the same request may behave differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Runs both phases and answers 201.
    Created,
    /// Answers 402 after phase `a`: a final answer, stored and replayed.
    Declined,
    /// Answers 503 after phase `a`: the key stays in progress for a retry.
    Fails,
    /// Panics after phase `a`.
    Panics,
    /// The process dies after the claim, before phase `a`.
    DiesBeforeA,
    /// The process dies after phase `a` committed.
    DiesAfterA,
    /// The process dies after phase `b` committed, before the answer is recorded.
    DiesAfterB,
}

impl Outcome {
    const ALL: [Self; 7] = [
        Self::Created,
        Self::Declined,
        Self::Fails,
        Self::Panics,
        Self::DiesBeforeA,
        Self::DiesAfterA,
        Self::DiesAfterB,
    ];

    fn header(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Declined => "declined",
            Self::Fails => "fails",
            Self::Panics => "panics",
            Self::DiesBeforeA => "dies-before-a",
            Self::DiesAfterA => "dies-after-a",
            Self::DiesAfterB => "dies-after-b",
        }
    }

    fn from_header(req: &HttpRequest) -> Self {
        let value = req
            .headers()
            .get("x-outcome")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("created");
        Self::ALL
            .into_iter()
            .find(|o| o.header() == value)
            .unwrap_or(Self::Created)
    }

    fn dies(self) -> bool {
        matches!(
            self,
            Self::DiesBeforeA | Self::DiesAfterA | Self::DiesAfterB
        )
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Step {
    /// One request: scope index, key index, body variant, outcome.
    Send(usize, u8, u8, Outcome),
    /// Copies of one request sent at once (outcomes that answer).
    Concurrent(usize, u8, u8, Outcome, usize),
    /// The key's lease ends now.
    LeaseEnds(usize, u8),
    /// The key's retention ends now.
    RetentionEnds(usize, u8),
    /// One expiry sweep.
    Sweep,
    /// Two relays deliver one batch each, at the same time.
    Relay,
    /// A relay dies while delivering its first message; its hold ends later.
    RelayDies,
    /// Holds on messages end now (a dead relay's, or a failed delivery's delay).
    HoldsEnd,
}

fn step() -> impl Strategy<Value = Step> {
    let scope = 0..SCOPES.len();
    let key = 0..3u8;
    // Mostly the same body, so that retries and replays happen.
    let variant = prop_oneof![4 => Just(0u8), 1 => Just(1u8)];
    let outcome = proptest::sample::select(Outcome::ALL.to_vec());
    let answering = proptest::sample::select(vec![
        Outcome::Created,
        Outcome::Declined,
        Outcome::Fails,
        Outcome::Panics,
    ]);
    prop_oneof![
        8 => (scope.clone(), key.clone(), variant.clone(), outcome)
            .prop_map(|(s, k, v, o)| Step::Send(s, k, v, o)),
        2 => (scope.clone(), key.clone(), variant, answering, 2..4usize)
            .prop_map(|(s, k, v, o, n)| Step::Concurrent(s, k, v, o, n)),
        3 => (scope.clone(), key.clone()).prop_map(|(s, k)| Step::LeaseEnds(s, k)),
        2 => (scope, key).prop_map(|(s, k)| Step::RetentionEnds(s, k)),
        1 => Just(Step::Sweep),
        1 => Just(Step::Relay),
        1 => Just(Step::RelayDies),
        1 => Just(Step::HoldsEnd),
    ]
}

/// The part of the database each backend spells differently, and the effects table.
trait ModelStore: TestBackend {
    /// A moment one second ago, as the key and outbox tables store times.
    const PAST: &'static str;

    /// Runs one statement of the test's own (time moves, resets).
    fn run(pool: &Pool<Self>, sql: String) -> impl Future<Output = ()>;

    /// Records one side effect of a phase, in the phase's transaction.
    fn effect(
        conn: &mut Self::Connection,
        scope: i64,
        tag: &str,
        phase: &str,
        derived: &str,
    ) -> impl Future<Output = sqlx::Result<()>>;
}

macro_rules! model_store {
    ($db:ty, $past:literal) => {
        impl ModelStore for $db {
            const PAST: &'static str = $past;

            async fn run(pool: &Pool<Self>, sql: String) {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .execute(pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }

            async fn effect(
                conn: &mut Self::Connection,
                scope: i64,
                tag: &str,
                phase: &str,
                derived: &str,
            ) -> sqlx::Result<()> {
                sqlx::query(
                    "INSERT INTO effects (scope, tag, phase, derived) VALUES ($1, $2, $3, $4)",
                )
                .bind(scope)
                .bind(tag)
                .bind(phase)
                .bind(derived)
                .execute(conn)
                .await
                .map(drop)
            }
        }
    };
}
model_store!(sqlx::Postgres, "now() - interval '1 second'");
model_store!(
    sqlx::Sqlite,
    "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
);

/// Where a dying handler stops: it tells the test, then never finishes. The test drops
/// the request, as a process that dies drops everything it had in memory.
#[derive(Debug, Default)]
struct Control {
    dying: Notify,
}

impl Control {
    async fn die(&self) -> Infallible {
        self.dying.notify_one();
        std::future::pending().await
    }
}

#[derive(Debug, Deserialize)]
struct OpBody {
    tag: String,
    variant: u8,
}

/// Two phases, each recording an effect with the operation's derived key; `b` also
/// writes an outbox message. The answer names the scope, so a replay to another scope
/// would show.
#[idem::idempotent(scope = account, lease = "30s")]
async fn operation<DB: ModelStore>(
    account: Account,
    phases: idem::Phases<DB>,
    body: web::Json<OpBody>,
    req: HttpRequest,
    control: web::Data<Control>,
) -> Result<HttpResponse, idem::PhaseError> {
    let outcome = Outcome::from_header(&req);
    let scope = account.id();
    let derived = phases.derived_key("charge");
    if outcome == Outcome::DiesBeforeA {
        match control.die().await {}
    }
    let a: String = phases
        .run("a", async |mut tx| {
            DB::effect(&mut tx, scope, &body.tag, "a", &derived).await?;
            Ok::<_, idem::PhaseError>(derived.clone())
        })
        .await?;
    // Lets concurrent duplicates interleave between the phases.
    tokio::task::yield_now().await;
    match outcome {
        Outcome::Declined => {
            return Ok(HttpResponse::PaymentRequired().body(format!("declined {scope}")));
        }
        Outcome::Fails => return Ok(HttpResponse::ServiceUnavailable().body("try later")),
        Outcome::Panics => panic!("the model's handler panics after phase a"),
        Outcome::DiesAfterA => match control.die().await {},
        _ => {}
    }
    let b: String = phases
        .run("b", async |mut tx| {
            DB::effect(&mut tx, scope, &body.tag, "b", &derived).await?;
            let payload =
                serde_json::json!({ "scope": scope, "tag": body.tag, "derived": derived });
            tx.enqueue("model", &payload).await?;
            Ok::<_, idem::PhaseError>(derived.clone())
        })
        .await?;
    if outcome == Outcome::DiesAfterB {
        match control.die().await {}
    }
    Ok(HttpResponse::Created().json(serde_json::json!({
        "scope": scope, "tag": body.tag, "variant": body.variant, "a": a, "b": b,
    })))
}

/// One operation of the model: a key from its first use until it completes.
#[derive(Debug, Default)]
struct Op {
    variant: u8,
    /// The first final answer, `(status, body)`; every replay must equal it.
    original: Option<(u16, Bytes)>,
    /// The derived key its phases used, once one committed.
    derived: Option<String>,
    /// The retention ended (time was moved past it).
    retention_over: bool,
}

/// What the model knows, and what it saw happen.
#[derive(Debug, Default)]
struct Model {
    ops: HashMap<(i64, String), Op>,
    /// Derived keys of operations that ended; they must never be used again.
    retired: HashSet<String>,
}

/// Deliveries in progress and done, from every relay of a sequence.
#[derive(Debug, Default)]
struct Deliveries {
    in_flight: HashSet<String>,
    delivered: HashSet<String>,
    overlaps: Vec<String>,
}

type Shared = Arc<Mutex<Deliveries>>;

fn lock(deliveries: &Shared) -> std::sync::MutexGuard<'_, Deliveries> {
    deliveries.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Fails the sequence with a message, which proptest shows with the shrunk steps.
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

struct Run<'a, DB: ModelStore> {
    env: &'a Env<DB>,
    app: TestApp,
    control: web::Data<Control>,
    model: Model,
    deliveries: Shared,
}

impl<DB: ModelStore> Run<'_, DB> {
    fn request(
        &self,
        scope: usize,
        key: u8,
        variant: u8,
        outcome: Outcome,
    ) -> support::TestRequest {
        let body = serde_json::json!({ "tag": format!("k{key}"), "variant": variant }).to_string();
        support::post("/model/op", SCOPES[scope], &format!("k{key}"), &body)
            .insert_header(("x-outcome", outcome.header()))
    }

    /// Sends one request; `None` when its handler died.
    async fn send(&self, scope: usize, key: u8, variant: u8, outcome: Outcome) -> Option<Reply> {
        let call = self.app.call(self.request(scope, key, variant, outcome));
        if !outcome.dies() {
            return Some(call.await);
        }
        match select(call, Box::pin(self.control.dying.notified())).await {
            Either::Left((reply, _)) => Some(reply),
            Either::Right(((), call)) => {
                drop(call);
                None
            }
        }
    }

    /// Before a request: a completed key past its retention starts a new operation.
    fn begin(&mut self, scope: usize, key: u8, variant: u8) {
        let id = (SCOPES[scope], format!("k{key}"));
        let ended = self
            .model
            .ops
            .get(&id)
            .is_some_and(|op| op.original.is_some() && op.retention_over);
        if ended {
            let op = self.model.ops.remove(&id).expect("present");
            self.model.retired.extend(op.derived);
        }
        self.model.ops.entry(id).or_insert_with(|| Op {
            variant,
            ..Op::default()
        });
    }

    /// Checks one answer against the model.
    /// `concurrent`: sent beside copies of itself, so a 409 (a copy holds the key) is
    /// always a right answer.
    fn answered(
        &mut self,
        scope: usize,
        key: u8,
        variant: u8,
        reply: &Reply,
        concurrent: bool,
    ) -> Result<(), TestCaseError> {
        let id = (SCOPES[scope], format!("k{key}"));
        let op = self.model.ops.get_mut(&id).expect("begun");
        let status = reply.status;
        if !reply.replayed() && !matches!(status, 409 | 422) {
            // An attempt ran: a claim or a takeover gives the key a fresh retention.
            op.retention_over = false;
        }
        if variant != op.variant {
            check!(
                status == 422,
                "{id:?}: another body under a live key got {status}, not 422"
            );
            return Ok(());
        }
        if concurrent && status == 409 {
            return Ok(());
        }
        if let Some((original_status, original_body)) = &op.original {
            check!(
                reply.replayed(),
                "{id:?}: a completed key within its retention answered {status} without replaying"
            );
            check!(
                status == *original_status && reply.body == *original_body,
                "{id:?}: the replay {status} {:?} differs from the original {original_status} {:?}",
                reply.body,
                original_body
            );
            return Ok(());
        }
        check!(
            !reply.replayed(),
            "{id:?}: a replay of an answer never given: {status}"
        );
        if matches!(status, 201 | 402) {
            op.original = Some((status, reply.body.clone()));
            if status == 201 {
                let body: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
                check!(
                    body["scope"] == SCOPES[scope],
                    "{id:?}: answered for scope {}",
                    body["scope"]
                );
                let derived = body["a"].as_str().unwrap_or_default().to_owned();
                check!(
                    body["b"] == derived.as_str(),
                    "{id:?}: phases a and b saw different derived keys"
                );
                match &op.derived {
                    Some(known) => check!(
                        *known == derived,
                        "{id:?}: the answer's derived key {derived} is not the operation's {known}"
                    ),
                    None => op.derived = Some(derived),
                }
            }
        } else {
            check!(
                matches!(status, 409 | 500 | 503),
                "{id:?}: unexpected answer {status}: {:?}",
                reply.body
            );
        }
        Ok(())
    }

    async fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match *step {
            Step::Send(scope, key, variant, outcome) => {
                self.begin(scope, key, variant);
                match self.send(scope, key, variant, outcome).await {
                    Some(reply) => self.answered(scope, key, variant, &reply, false)?,
                    // The handler ran, so its attempt claimed or took over the key.
                    None => {
                        if let Some(op) =
                            self.model.ops.get_mut(&(SCOPES[scope], format!("k{key}")))
                        {
                            op.retention_over = false;
                        }
                    }
                }
            }
            Step::Concurrent(scope, key, variant, outcome, copies) => {
                self.begin(scope, key, variant);
                let calls =
                    (0..copies).map(|_| self.app.call(self.request(scope, key, variant, outcome)));
                let replies = join_all(calls).await;
                // A copy that finished first is the original; the others replay it or
                // were told it was in progress. Check the non-replays first.
                let (replays, firsts): (Vec<_>, Vec<_>) =
                    replies.iter().partition(|r| r.replayed());
                for reply in firsts.into_iter().chain(replays) {
                    self.answered(scope, key, variant, reply, true)?;
                }
            }
            Step::LeaseEnds(scope, key) => {
                self.set_time("locked_until", scope, key).await;
            }
            Step::RetentionEnds(scope, key) => {
                self.set_time("expires_at", scope, key).await;
                if let Some(op) = self.model.ops.get_mut(&(SCOPES[scope], format!("k{key}"))) {
                    op.retention_over = true;
                }
            }
            Step::Sweep => {
                idem::Expiry::new(self.env.pool.clone())
                    .sweep_once()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("sweep: {e}")))?;
                for ((scope, key), op) in &self.model.ops {
                    if op.original.is_none() && op.derived.is_some() {
                        let left = DB::scalar(
                            &self.env.pool,
                            &format!(
                                "SELECT count(*) FROM idem_keys WHERE scope = '{scope}' AND idem_key = '{key}'"
                            ),
                        )
                        .await;
                        check!(
                            left == 1,
                            "({scope}, {key}): the sweep deleted a key in progress"
                        );
                    }
                }
            }
            Step::Relay => {
                self.relay_round().await?;
            }
            Step::RelayDies => {
                let reached = Arc::new(Notify::new());
                let signal = Arc::clone(&reached);
                let deliveries = Arc::clone(&self.deliveries);
                let relay = idem::Relay::new(self.env.pool.clone()).batch_size(2);
                let dying = move |message: idem::Message| {
                    lock(&deliveries).in_flight.insert(message.id().to_owned());
                    signal.notify_one();
                    std::future::pending::<Result<(), Infallible>>()
                };
                let delivery = relay.deliver_once(&dying);
                match select(Box::pin(delivery), Box::pin(reached.notified())).await {
                    Either::Left((taken, _)) => {
                        taken.map_err(|e| TestCaseError::fail(format!("relay: {e}")))?;
                    }
                    Either::Right(((), delivery)) => drop(delivery),
                }
                // The dead relay's delivery is over, whatever it did.
                lock(&self.deliveries).in_flight.clear();
            }
            Step::HoldsEnd => self.end_holds().await,
        }
        self.check_effects().await
    }

    async fn set_time(&self, column: &str, scope: usize, key: u8) {
        DB::run(
            &self.env.pool,
            format!(
                "UPDATE idem_keys SET {column} = {} WHERE scope = '{}' AND idem_key = 'k{key}' \
                 AND {column} IS NOT NULL",
                DB::PAST,
                SCOPES[scope]
            ),
        )
        .await;
    }

    async fn end_holds(&self) {
        DB::run(
            &self.env.pool,
            format!(
                "UPDATE idem_outbox SET available_at = {} WHERE delivered_at IS NULL",
                DB::PAST
            ),
        )
        .await;
    }

    /// Two relays deliver a batch each, concurrently, through a handler that notices a
    /// message delivered while its other delivery is still running.
    async fn relay_round(&self) -> Result<usize, TestCaseError> {
        let deliveries = Arc::clone(&self.deliveries);
        let handler = move |message: idem::Message| {
            let deliveries = Arc::clone(&deliveries);
            async move {
                let id = message.id().to_owned();
                {
                    let mut d = lock(&deliveries);
                    if !d.in_flight.insert(id.clone()) {
                        d.overlaps.push(id.clone());
                    }
                }
                tokio::task::yield_now().await;
                let mut d = lock(&deliveries);
                d.in_flight.remove(&id);
                d.delivered.insert(id);
                Ok::<_, Infallible>(())
            }
        };
        let first = idem::Relay::new(self.env.pool.clone()).batch_size(2);
        let second = idem::Relay::new(self.env.pool.clone()).batch_size(2);
        let (a, b) =
            futures_util::join!(first.deliver_once(&handler), second.deliver_once(&handler));
        let taken = a
            .and_then(|a| b.map(|b| a + b))
            .map_err(|e| TestCaseError::fail(format!("relay: {e}")))?;
        let overlaps = lock(&self.deliveries).overlaps.clone();
        check!(
            overlaps.is_empty(),
            "messages delivered twice at once: {overlaps:?}"
        );
        Ok(taken)
    }

    /// After each step: every committed phase ran at most once per operation, with the
    /// operation's derived key; every phase `b` wrote exactly one message.
    async fn check_effects(&mut self) -> Result<(), TestCaseError> {
        let groups = DB::texts(
            &self.env.pool,
            "SELECT scope || ' ' || tag || ' ' || phase || ' ' || derived || ' ' || CAST(count(*) AS TEXT)
               FROM effects GROUP BY scope, tag, phase, derived",
        )
        .await;
        for group in groups {
            let parts: Vec<&str> = group.split(' ').collect();
            let [scope, tag, phase, derived, count] = parts.as_slice() else {
                panic!("{group}");
            };
            check!(
                *count == "1",
                "({scope}, {tag}): phase {phase} committed {count} times in one operation"
            );
            if self.model.retired.contains(*derived) {
                continue;
            }
            let scope: i64 = scope.parse().expect("scope");
            let Some(op) = self.model.ops.get_mut(&(scope, (*tag).to_owned())) else {
                return Err(TestCaseError::fail(format!(
                    "({scope}, {tag}): an effect of no operation"
                )));
            };
            match &op.derived {
                Some(known) => check!(
                    known == derived,
                    "({scope}, {tag}): derived key {derived} while the operation's is {known}"
                ),
                None => op.derived = Some((*derived).to_owned()),
            }
        }
        let b_effects = DB::scalar(
            &self.env.pool,
            "SELECT count(*) FROM effects WHERE phase = 'b'",
        )
        .await;
        let messages = DB::scalar(&self.env.pool, "SELECT count(*) FROM idem_outbox").await;
        check!(
            b_effects == messages,
            "{b_effects} phases b but {messages} messages"
        );
        Ok(())
    }

    /// At the end: every message is delivered once the holds end.
    async fn drain(&self) -> Result<(), TestCaseError> {
        for _ in 0..50 {
            self.end_holds().await;
            if self.relay_round().await? == 0 {
                break;
            }
        }
        let undelivered = DB::scalar(
            &self.env.pool,
            "SELECT count(*) FROM idem_outbox WHERE delivered_at IS NULL",
        )
        .await;
        check!(undelivered == 0, "{undelivered} messages never delivered");
        let messages = DB::texts(&self.env.pool, "SELECT CAST(id AS TEXT) FROM idem_outbox").await;
        let delivered = &lock(&self.deliveries).delivered;
        for id in messages {
            check!(
                delivered.contains(&id),
                "message {id} marked delivered but never handed over"
            );
        }
        Ok(())
    }
}

/// Empties what one sequence leaves behind, so the next starts from nothing.
async fn reset<DB: ModelStore>(pool: &Pool<DB>) {
    for table in ["effects", "idem_phases", "idem_keys", "idem_outbox"] {
        DB::run(pool, format!("DELETE FROM {table}")).await;
    }
}

async fn run_sequence<DB: ModelStore>(env: &Env<DB>, steps: &[Step]) -> Result<(), TestCaseError> {
    reset(&env.pool).await;
    let control = web::Data::new(Control::default());
    let data = control.clone();
    let app = support::service_with(&env.idem(), move |cfg| {
        cfg.app_data(data)
            .route("/model/op", web::post().to(operation::<DB>));
    })
    .await;
    let mut run = Run {
        env,
        app,
        control,
        model: Model::default(),
        deliveries: Arc::default(),
    };
    for step in steps {
        run.step(step).await?;
    }
    run.drain().await
}

fn cases() -> u32 {
    std::env::var("IDEM_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

fn model_test<DB: ModelStore>() {
    let system = actix_web::rt::System::new();
    let env = system.block_on(async {
        let env = Env::<DB>::open().await;
        create_effects(&env.pool).await;
        env
    });
    // The handler's panics are part of the model; their messages are noise here.
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("the model's handler panics") {
            quiet(info);
        }
    }));
    let config = Config {
        cases: cases(),
        max_shrink_iters: 2_000,
        failure_persistence: None,
        ..Config::default()
    };
    let started = std::time::Instant::now();
    let steps_run = std::cell::Cell::new(0usize);
    let mut runner = TestRunner::new(config);
    let result = runner.run(&proptest::collection::vec(step(), 1..24), |steps| {
        steps_run.set(steps_run.get() + steps.len());
        system.block_on(run_sequence(&env, &steps))
    });
    eprintln!(
        "model ({}): {} sequences, {} steps (shrinking included), {:?}",
        std::any::type_name::<DB>(),
        cases(),
        steps_run.get(),
        started.elapsed()
    );
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn postgres_follows_the_model() {
    model_test::<sqlx::Postgres>();
}

#[test]
fn sqlite_follows_the_model() {
    model_test::<sqlx::Sqlite>();
}

/// Runs one fixed sequence on both databases.
fn regression(steps: &[Step]) {
    let system = actix_web::rt::System::new();
    let postgres = system.block_on(async {
        let env = Env::<sqlx::Postgres>::open().await;
        create_effects(&env.pool).await;
        run_sequence(&env, steps).await
    });
    if let Err(failure) = postgres {
        panic!("postgres: {failure}");
    }
    let sqlite = system.block_on(async {
        let env = Env::<sqlx::Sqlite>::open().await;
        create_effects(&env.pool).await;
        run_sequence(&env, steps).await
    });
    if let Err(failure) = sqlite {
        panic!("sqlite: {failure}");
    }
}

// Sequences the model shrank to when it ran against the runtime before phased keys in
// progress were kept past their retention (each failed there in under a second).

/// Shrunk on SQLite: the sweep deleted a key whose phase `a` had committed.
#[test]
fn regression_the_sweep_keeps_a_key_in_progress_past_its_retention() {
    regression(&[
        Step::Send(0, 0, 0, Outcome::Fails),
        Step::RetentionEnds(0, 0),
        Step::Sweep,
    ]);
}

/// Shrunk on PostgreSQL: the late retry started over with new derived keys.
#[test]
fn regression_a_late_retry_keeps_the_derived_keys() {
    regression(&[
        Step::Send(0, 0, 0, Outcome::Fails),
        Step::RetentionEnds(0, 0),
        Step::Send(0, 0, 0, Outcome::Created),
        Step::Send(0, 0, 0, Outcome::Created),
    ]);
}

/// The issue's own scenario: a crash after a phase, the retention and the lease end, a
/// sweep, then the retry and its replay.
#[test]
fn regression_a_crash_then_a_late_retry_resumes() {
    regression(&[
        Step::Send(0, 0, 0, Outcome::DiesAfterA),
        Step::RetentionEnds(0, 0),
        Step::LeaseEnds(0, 0),
        Step::Sweep,
        Step::Send(0, 0, 0, Outcome::Created),
        Step::Send(0, 0, 0, Outcome::Created),
    ]);
}

async fn create_effects<DB: ModelStore>(pool: &Pool<DB>) {
    DB::run(
        pool,
        "CREATE TABLE effects (scope BIGINT NOT NULL, tag TEXT NOT NULL, phase TEXT NOT NULL, \
         derived TEXT NOT NULL)"
            .to_owned(),
    )
    .await;
}
