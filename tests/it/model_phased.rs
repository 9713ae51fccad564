//! Model-based test of the phased form: proptest generates sequences of requests,
//! concurrent duplicates, handler outcomes (2xx, a stored 4xx, 5xx, panic), process
//! deaths at each phase boundary, requests dropped after any number of polls, lease and
//! retention expiry, expiry sweeps, relay runs and relay deaths, and drives the real
//! runtime through them on both databases, with the handler on actix-web and on axum.
//! After every step the database and the answers are checked against a reference model:
//!
//! - each committed phase ran at most once per operation (an operation is a key from its
//!   first use until it completes, whatever attempts and retentions it passes through);
//! - an operation's derived keys never change, and a new operation gets new ones;
//! - a replay is byte-identical to the operation's original answer, for its own scope;
//! - a different body under a live key is a 422, a completed key within its retention
//!   replays, and the sweep never deletes a key in progress;
//! - no outbox message is delivered twice at the same time, and every one is delivered;
//! - a dropped request leaves no connection inside an open transaction, and what it left
//!   is nothing, a key in progress for a retry, or a final answer every retry replays.
//!
//! Time moves by rewriting the rows' time columns, never by sleeping. A failing sequence
//! shrinks to a short readable list of steps, printed with the failure; it then belongs
//! in the regression tests at the end of this file, as the ones there came to be.
//! `IDEM_MODEL_CASES` sets the number of sequences per database and framework (default
//! 24).

use crate::model_support;
use crate::support;

use model_support::run::Phased;
use model_support::steps::{Outcome, Step, step};
use model_support::{explore, regression};
use support::Framework;

/// Sequences of up to 23 steps.
fn sequences() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..24)
}

#[test]
fn postgres_follows_the_model_on_actix() {
    explore::<Phased, sqlx::Postgres>(Framework::Actix, sequences());
}

#[test]
fn postgres_follows_the_model_on_axum() {
    explore::<Phased, sqlx::Postgres>(Framework::Axum, sequences());
}

#[test]
fn sqlite_follows_the_model_on_actix() {
    explore::<Phased, sqlx::Sqlite>(Framework::Actix, sequences());
}

#[test]
fn sqlite_follows_the_model_on_axum() {
    explore::<Phased, sqlx::Sqlite>(Framework::Axum, sequences());
}

// Sequences the model shrank to when it ran against the runtime before phased keys in
// progress were kept past their retention (each failed there in under a second).

/// Shrunk on SQLite: the sweep deleted a key whose phase `a` had committed.
#[test]
fn regression_the_sweep_keeps_a_key_in_progress_past_its_retention() {
    regression::<Phased>(&[
        Step::Send(0, 0, 0, Outcome::Fails),
        Step::RetentionEnds(0, 0),
        Step::Sweep,
    ]);
}

/// Shrunk on PostgreSQL: the late retry started over with new derived keys.
#[test]
fn regression_a_late_retry_keeps_the_derived_keys() {
    regression::<Phased>(&[
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
    regression::<Phased>(&[
        Step::Send(0, 0, 0, Outcome::DiesAfterA),
        Step::RetentionEnds(0, 0),
        Step::LeaseEnds(0, 0),
        Step::Sweep,
        Step::Send(0, 0, 0, Outcome::Created),
        Step::Send(0, 0, 0, Outcome::Created),
    ]);
}
