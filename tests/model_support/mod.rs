//! What the model-based tests run on. For `model_phased.rs`: the steps a sequence is made
//! of and their generator (`steps`), the handler under test (`handler`), the reference
//! model and its checks of each answer (`model`), and the run that drives the runtime
//! through one sequence (`run`). For `model_single.rs`, the same parts of the
//! single-transaction form (`single`). Shared by both: the database statements each
//! backend spells its own way (`store`), and the search and the regression runs below.
//!
//! Each test file uses the part it needs, so what the other uses is dead code in it.
//! `check!` is defined before the modules so that each of them can use it.
#![allow(dead_code)]

/// Fails the sequence with a message, which proptest shows with the shrunk steps.
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(proptest::test_runner::TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

pub(crate) mod handler;
pub(crate) mod model;
pub(crate) mod run;
pub(crate) mod single;
pub(crate) mod steps;
pub(crate) mod store;

use std::fmt::Debug;
use std::pin::pin;
use std::task::Poll;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::support::{Env, Framework};
use store::{ModelStore, create_effects};

/// A form's model: the steps of its sequences and the run of one sequence.
pub(crate) trait Sequence {
    type Step: Clone + Debug;

    /// Runs `steps` against the runtime from an empty database, checking each answer and
    /// the database after each step.
    fn run<DB: ModelStore>(
        env: &Env<DB>,
        steps: &[Self::Step],
    ) -> impl Future<Output = Result<(), TestCaseError>>;
}

/// Sequences per database and framework: `IDEM_MODEL_CASES`, 24 unless set.
fn cases() -> u32 {
    std::env::var("IDEM_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

/// A fresh database of `DB` with the effects table the handlers write to.
async fn open<DB: ModelStore>() -> Env<DB> {
    let env = Env::<DB>::open().await;
    create_effects(&env.pool).await;
    env
}

/// Searches `steps` for a sequence of model `M` that fails, on `DB` with the handler on
/// `framework`, and panics with the sequence it shrank to if it finds one.
pub(crate) fn explore<M: Sequence, DB: ModelStore>(
    framework: Framework,
    steps: impl Strategy<Value = Vec<M::Step>>,
) {
    framework.select();
    let system = actix_web::rt::System::new();
    let env = system.block_on(open::<DB>());
    // The handlers' panics are part of the model; their messages are noise here.
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
    let result = runner.run(&steps, |steps| {
        steps_run.set(steps_run.get() + steps.len());
        let result = system.block_on(M::run(&env, &steps));
        if result.is_err()
            && let Some(end) = DB::END_LEFT_OPEN
        {
            system.block_on(DB::scalar(&env.pool, end));
        }
        result
    });
    eprintln!(
        "model ({}, {framework:?}): {} sequences, {} steps (shrinking included), {:?}",
        std::any::type_name::<DB>(),
        cases(),
        steps_run.get(),
        started.elapsed()
    );
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// `call`'s answer, or `None` when it was still pending after `polls` polls and was
/// dropped there: a client that disconnects, or a process that dies, at that point.
pub(crate) async fn cut_after<T>(call: impl Future<Output = T>, polls: u8) -> Option<T> {
    let mut call = pin!(call);
    let mut left = polls;
    std::future::poll_fn(move |cx| match call.as_mut().poll(cx) {
        Poll::Ready(answer) => Poll::Ready(Some(answer)),
        Poll::Pending if left == 0 => Poll::Ready(None),
        Poll::Pending => {
            left -= 1;
            Poll::Pending
        }
    })
    .await
}

/// Runs one fixed sequence of model `M` on both databases, with the handler on each
/// framework: a sequence a search once shrank to.
pub(crate) fn regression<M: Sequence>(steps: &[M::Step]) {
    for framework in [Framework::Actix, Framework::Axum] {
        framework.select();
        let system = actix_web::rt::System::new();
        let postgres =
            system.block_on(async { M::run(&open::<sqlx::Postgres>().await, steps).await });
        if let Err(failure) = postgres {
            panic!("postgres, {framework:?}: {failure}");
        }
        let sqlite = system.block_on(async { M::run(&open::<sqlx::Sqlite>().await, steps).await });
        if let Err(failure) = sqlite {
            panic!("sqlite, {framework:?}: {failure}");
        }
    }
}
