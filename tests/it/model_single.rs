//! Model-based test of the single-transaction form, the one most handlers use: proptest
//! generates sequences of requests from two tenants sharing key names, concurrent
//! duplicates, one key sent with two bodies at once, handler outcomes (201 and a stored
//! 402, a transient 429, a 503, a panic, a process that dies mid-handler), retention
//! ends and expiry sweeps, and drives the real runtime through them on both databases,
//! with the handler on actix-web and on axum. Each answer is checked against a reference
//! model, and after every step the database:
//!
//! - the business writes committed are exactly those of the stored answers: none twice,
//!   none of an attempt that rolled back or died, none lost under an answer that says it
//!   happened;
//! - a replay is byte-identical to the operation's stored answer, for its own tenant, and
//!   the handler never runs again for a key whose answer is stored within its retention;
//! - another body under a stored key is a 422; a 409 (or SQLite's 503 `storage-busy`)
//!   only answers a copy sent beside the one that ran;
//! - a key never outlives, unanswered, the request that held it, and the sweep never
//!   takes a stored answer within its retention.
//!
//! Time moves by rewriting the rows' time columns, never by sleeping. A failing sequence
//! shrinks to a short list of steps, printed with the failure; it then belongs in the
//! regression tests at the end of this file. `IDEM_MODEL_CASES` sets the number of
//! sequences per database and framework (default 24).

use crate::model_support;
use crate::support;

use model_support::single::run::Single;
use model_support::single::{Outcome, Step, step};
use model_support::{explore, regression};
use support::Framework;

/// Sequences of up to 23 steps.
fn sequences() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..24)
}

#[test]
fn postgres_follows_the_model_on_actix() {
    explore::<Single, sqlx::Postgres>(Framework::Actix, sequences());
}

#[test]
fn postgres_follows_the_model_on_axum() {
    explore::<Single, sqlx::Postgres>(Framework::Axum, sequences());
}

#[test]
fn sqlite_follows_the_model_on_actix() {
    explore::<Single, sqlx::Sqlite>(Framework::Actix, sequences());
}

#[test]
fn sqlite_follows_the_model_on_axum() {
    explore::<Single, sqlx::Sqlite>(Framework::Axum, sequences());
}

/// A retry after the process died mid-handler runs the request, and its replay follows;
/// then a late retry after the retention and a sweep starts a new operation.
#[test]
fn regression_a_death_then_a_retry_then_a_late_retry() {
    regression::<Single>(&[
        Step::Send(0, 0, 0, Outcome::Dies),
        Step::Send(0, 0, 0, Outcome::Created),
        Step::Send(0, 0, 0, Outcome::Created),
        Step::RetentionEnds(0, 0),
        Step::Sweep,
        Step::Send(0, 0, 1, Outcome::Declined),
        Step::Race(0, 0, Outcome::Created),
    ]);
}
