//! One sequence run against the runtime: each step sent or done, the model told what
//! came back, and the database checked after every step; at the end, every message
//! delivered.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::web;
use futures_util::future::{Either, join_all, select};
use proptest::test_runner::TestCaseError;
use tokio::sync::Notify;

use super::cut_after;
use super::handler::{Control, axum_on_postgres, axum_on_sqlite, operation};
use super::model::Model;
use super::steps::{Outcome, SCOPES, Step};
use super::store::{ModelStore, move_time, reset, settle, stored_answer, sweep};
use crate::support::{self, Env, Reply, TestApp};

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
        self.control.unless_dying(call).await
    }

    async fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match *step {
            Step::Send(scope, key, variant, outcome) => {
                self.model.begin(scope, key, variant);
                match self.send(scope, key, variant, outcome).await {
                    Some(reply) => self.model.answered(scope, key, variant, &reply, false)?,
                    // The handler ran, so its attempt claimed or took over the key.
                    None => {
                        settle(self.env).await?;
                        if let Some(op) =
                            self.model.ops.get_mut(&(SCOPES[scope], format!("k{key}")))
                        {
                            op.retention_over = false;
                        }
                    }
                }
            }
            Step::Concurrent(scope, key, variant, outcome, copies) => {
                self.model.begin(scope, key, variant);
                let calls =
                    (0..copies).map(|_| self.app.call(self.request(scope, key, variant, outcome)));
                let replies = join_all(calls).await;
                // A copy that finished first is the original; the others replay it or
                // were told it was in progress. Check the non-replays first.
                let (replays, firsts): (Vec<_>, Vec<_>) =
                    replies.iter().partition(|r| r.replayed());
                for reply in firsts.into_iter().chain(replays) {
                    self.model.answered(scope, key, variant, reply, true)?;
                }
            }
            Step::Cut(scope, key, variant, outcome, polls) => {
                let fresh = self.model.begin(scope, key, variant);
                let call = self.app.call(self.request(scope, key, variant, outcome));
                match cut_after(call, polls).await {
                    Some(reply) => self.model.answered(scope, key, variant, &reply, false)?,
                    None => {
                        settle(self.env).await?;
                        let in_progress = DB::scalar(
                            &self.env.pool,
                            &format!(
                                "SELECT count(*) FROM idem_keys WHERE scope = '{}' \
                                 AND idem_key = 'k{key}' AND state <> 'completed'",
                                SCOPES[scope]
                            ),
                        )
                        .await;
                        let stored = stored_answer(&self.env.pool, SCOPES[scope], key).await;
                        self.model
                            .cut(scope, key, variant, fresh, in_progress > 0, stored)?;
                    }
                }
            }
            Step::LeaseEnds(scope, key) => {
                move_time(&self.env.pool, "locked_until", SCOPES[scope], key).await;
            }
            Step::RetentionEnds(scope, key) => {
                move_time(&self.env.pool, "expires_at", SCOPES[scope], key).await;
                if let Some(op) = self.model.ops.get_mut(&(SCOPES[scope], format!("k{key}"))) {
                    op.retention_over = true;
                }
            }
            Step::Sweep => {
                sweep(&self.env.pool).await?;
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
                let relay = idem::outbox::Relay::new(self.env.pool.clone()).batch_size(2);
                let dying = move |message: idem::outbox::Message| {
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
                settle(self.env).await?;
            }
            Step::HoldsEnd => self.end_holds().await,
        }
        self.check_effects().await
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
        let handler = move |message: idem::outbox::Message| {
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
        let first = idem::outbox::Relay::new(self.env.pool.clone()).batch_size(2);
        let second = idem::outbox::Relay::new(self.env.pool.clone()).batch_size(2);
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

/// The phased form's model.
pub(crate) struct Phased;

impl super::Sequence for Phased {
    type Step = Step;

    async fn run<DB: ModelStore>(env: &Env<DB>, steps: &[Step]) -> Result<(), TestCaseError> {
        run_sequence(env, steps).await
    }
}

async fn run_sequence<DB: ModelStore>(env: &Env<DB>, steps: &[Step]) -> Result<(), TestCaseError> {
    reset(&env.pool).await;
    let control = web::Data::new(Control::default());
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    let app = support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control)
                .route("/model/op", web::post().to(operation::<DB>));
        },
        move || {
            support::by_database::<DB, _>(
                || axum_on_postgres::route(axum_control.clone()),
                || axum_on_sqlite::route(axum_control.clone()),
            )
        },
    )
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
    run.drain().await?;
    // What the last step's dropped requests set going finishes here, not in the next
    // sequence, whose reset it would race.
    settle(env).await
}
