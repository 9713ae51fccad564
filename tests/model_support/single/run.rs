//! One sequence of the single-transaction model run against the runtime: each step sent
//! or done, the model told what came back, and after every step the database's effects
//! and keys checked against it.

use std::collections::HashSet;

use actix_web::web;
use futures_util::future::join_all;
use proptest::test_runner::TestCaseError;

use super::handler::{axum_on_postgres, axum_on_sqlite, operation};
use super::{Beside, Model, Outcome, Step};
use crate::model_support::cut_after;
use crate::model_support::handler::Control;
use crate::model_support::steps::SCOPES;
use crate::model_support::store::{ModelStore, move_time, reset, settle, stored_answer, sweep};
use crate::support::{self, Env, Reply, TestApp};

struct Run<'a, DB: ModelStore> {
    env: &'a Env<DB>,
    /// Two instances of the application on one database, as two processes behind a
    /// load balancer: each has its own idem, and so its own record of the keys it holds.
    apps: [TestApp; 2],
    control: web::Data<Control>,
    model: Model,
}

impl<DB: ModelStore> Run<'_, DB> {
    fn request(scope: usize, key: u8, variant: u8, outcome: Outcome) -> support::TestRequest {
        let body = serde_json::json!({ "tag": format!("k{key}"), "variant": variant }).to_string();
        support::post("/model/single", SCOPES[scope], &format!("k{key}"), &body)
            .insert_header(("x-outcome", outcome.header()))
    }

    /// Sends one request; `None` when its handler died, and the request was dropped as a
    /// dying process drops everything it had in memory.
    async fn send(&self, scope: usize, key: u8, variant: u8, outcome: Outcome) -> Option<Reply> {
        let call = self.apps[0].call(Self::request(scope, key, variant, outcome));
        if outcome != Outcome::Dies {
            return Some(call.await);
        }
        self.control.unless_dying(call).await
    }

    async fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match *step {
            Step::Send(scope, key, variant, outcome) => {
                self.model.begin(scope, key);
                match self.send(scope, key, variant, outcome).await {
                    Some(reply) => {
                        let sent = [(variant, outcome, reply)];
                        self.model.answered(scope, key, &sent, Beside::Nothing)?;
                    }
                    None => settle(self.env).await?,
                }
            }
            Step::Concurrent(scope, key, variant, outcome, copies) => {
                self.model.begin(scope, key);
                let calls = (0..copies).map(|i| {
                    self.apps[(i + 1) % 2].call(Self::request(scope, key, variant, outcome))
                });
                let replies = join_all(calls).await;
                let sent: Vec<_> = replies.into_iter().map(|r| (variant, outcome, r)).collect();
                self.model.answered(scope, key, &sent, Beside::Copies)?;
            }
            Step::Race(scope, key, outcome) => {
                self.model.begin(scope, key);
                let (first, second) = futures_util::join!(
                    self.apps[0].call(Self::request(scope, key, 0, outcome)),
                    self.apps[1].call(Self::request(scope, key, 1, outcome)),
                );
                let sent = [(0, outcome, first), (1, outcome, second)];
                self.model.answered(scope, key, &sent, Beside::Copies)?;
            }
            Step::DiesBeside(scope, key, variant, outcome, copies) => {
                self.model.begin(scope, key);
                let copies = (0..copies).map(|i| {
                    self.apps[(i + 1) % 2].call(Self::request(scope, key, variant, outcome))
                });
                let (dying, replies) = futures_util::join!(
                    self.send(scope, key, variant, Outcome::Dies),
                    join_all(copies),
                );
                let mut sent: Vec<_> = replies.into_iter().map(|r| (variant, outcome, r)).collect();
                // It answered only if it did not run the handler: a replay or a problem.
                sent.extend(dying.map(|r| (variant, Outcome::Dies, r)));
                self.model.answered(scope, key, &sent, Beside::Copies)?;
            }
            Step::Tenants(key, variant, outcome) => {
                self.model.begin(0, key);
                self.model.begin(1, key);
                let (first, second) = futures_util::join!(
                    self.apps[0].call(Self::request(0, key, variant, outcome)),
                    self.apps[1].call(Self::request(1, key, variant, outcome)),
                );
                for (scope, reply) in [(0, first), (1, second)] {
                    let sent = [(variant, outcome, reply)];
                    self.model
                        .answered(scope, key, &sent, Beside::OtherTenant)?;
                }
            }
            Step::Cut(scope, key, variant, outcome, polls) => {
                self.model.begin(scope, key);
                let call = self.apps[0].call(Self::request(scope, key, variant, outcome));
                match cut_after(call, polls).await {
                    Some(reply) => {
                        let sent = [(variant, outcome, reply)];
                        self.model.answered(scope, key, &sent, Beside::Nothing)?;
                    }
                    None => {
                        settle(self.env).await?;
                        let stored = stored_answer(&self.env.pool, SCOPES[scope], key).await;
                        self.model.cut(scope, key, variant, stored)?;
                    }
                }
            }
            Step::RetentionEnds(scope, key) => {
                move_time(&self.env.pool, "expires_at", SCOPES[scope], key).await;
                if let Some(op) = self.model.ops.get_mut(&(SCOPES[scope], format!("k{key}"))) {
                    op.retention_over = true;
                }
            }
            Step::Sweep => {
                sweep(&self.env.pool).await?;
            }
        }
        self.check_database().await
    }

    /// After each step: the effects committed are exactly those the stored answers name
    /// (none twice, none of an attempt that rolled back, none lost); every stored answer
    /// within its retention is still there to replay; and no key is left without an
    /// answer, since in this form nothing outlives a request that did not store one.
    async fn check_database(&self) -> Result<(), TestCaseError> {
        let rows = DB::texts(
            &self.env.pool,
            "SELECT scope || ' ' || tag || ' ' || derived FROM effects WHERE phase = 'single'",
        )
        .await;
        let mut committed = HashSet::new();
        for row in rows {
            let parts: Vec<&str> = row.split(' ').collect();
            let [scope, tag, effect] = parts.as_slice() else {
                panic!("{row}");
            };
            let scope: i64 = scope.parse().expect("scope");
            let effect = (scope, (*tag).to_owned(), (*effect).to_owned());
            check!(
                committed.insert(effect.clone()),
                "effect {effect:?} committed twice"
            );
        }
        let unexpected: Vec<_> = committed.difference(&self.model.effects).collect();
        check!(
            unexpected.is_empty(),
            "effects committed that no stored answer names: {unexpected:?}"
        );
        let lost: Vec<_> = self.model.effects.difference(&committed).collect();
        check!(
            lost.is_empty(),
            "effects of stored answers that are not committed: {lost:?}"
        );
        let keys = DB::texts(
            &self.env.pool,
            "SELECT CAST(scope AS TEXT) || ' ' || idem_key || ' ' || state FROM idem_keys",
        )
        .await;
        for row in &keys {
            check!(
                row.ends_with(" completed"),
                "a key outlived the request that held it without an answer: {row}"
            );
        }
        for ((scope, key), op) in &self.model.ops {
            if op.original.is_some() && !op.retention_over {
                check!(
                    keys.iter()
                        .any(|row| row.starts_with(&format!("{scope} {key} "))),
                    "({scope}, {key}): the stored answer is gone within its retention"
                );
            }
        }
        Ok(())
    }
}

/// The single-transaction form's model.
pub(crate) struct Single;

impl crate::model_support::Sequence for Single {
    type Step = Step;

    async fn run<DB: ModelStore>(env: &Env<DB>, steps: &[Step]) -> Result<(), TestCaseError> {
        run_sequence(env, steps).await
    }
}

async fn run_sequence<DB: ModelStore>(env: &Env<DB>, steps: &[Step]) -> Result<(), TestCaseError> {
    reset(&env.pool).await;
    let control = web::Data::new(Control::default());
    let apps = [app(env, &control).await, app(env, &control).await];
    let mut run = Run {
        env,
        apps,
        control,
        model: Model::default(),
    };
    for step in steps {
        run.step(step).await?;
    }
    // What the last step's dropped requests set going finishes here, not in the next
    // sequence, whose reset it would race.
    settle(env).await
}

/// One instance of the application with the model's route, on either framework.
async fn app<DB: ModelStore>(env: &Env<DB>, control: &web::Data<Control>) -> TestApp {
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control)
                .route("/model/single", web::post().to(operation::<DB>));
        },
        move || {
            support::by_database::<DB, _>(
                || axum_on_postgres::route(axum_control.clone()),
                || axum_on_sqlite::route(axum_control.clone()),
            )
        },
    )
    .await
}
