//! The checker: retries every key until it completes, then compares the recorded answers
//! with each other, with the retention jumps and with what the database holds.
//!
//! A key lives once unless a jump moved it past its retention while it was completed:
//! then a sweep (or a reuse, which reclaims it) may end that life and its next use starts
//! a new operation. A key caught in progress must be resumed, never started again, so
//! however many jumps catch it in progress it keeps one operation (one order or payment,
//! one provider charge) until it finishes; only then may it end like any completed key.
//! Every life a key had is seen by the checker: a life can end only past its retention,
//! which only a jump causes (and reports), and the last life is the row left at the end.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::faults::{Caught, Jump};
use crate::workload::{Attempt, Form, Load, Op, Outcome, is_final};

mod answers;
mod database;
mod key;
mod retry;
mod rows;

use database::{Database, Effects, retained_keys};
use key::Key;
use retry::{PATIENCE, complete};

/// Keys retried at once by the checker.
const PARALLEL: usize = 16;

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) violations: Vec<String>,
    keys: usize,
    orders: usize,
    payments: usize,
    charges: usize,
    provider_calls: i64,
    receipts: usize,
    final_requests: usize,
    first_run_in_final: usize,
    /// Keys not retried: answered, then let go by a jump.
    let_go: usize,
    /// Keys answered whose record is gone, swept after a jump caught it completed.
    swept: usize,
    /// Keys with more than one life (a reuse after a jump and a sweep or reclaim).
    relived: usize,
    /// Keys a jump caught in progress (resumed afterwards, never started again).
    caught_in_progress: usize,
    /// Of those, keys that finished after the jump and then began a new life.
    finished_then_relived: usize,
}

impl Report {
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} keys retried until complete ({} requests; {} of them ran the handler: a first \
             run after earlier attempts all failed or were abandoned, or a new operation on a \
             key a jump let go); {} keys not retried, answered before a jump let them go ({} \
             of them swept since); {} orders, {} payments, \
             {} provider charges ({} provider calls), {} receipts delivered; {} keys caught \
             in progress by a jump ({} of them finished and began a new life later), {} keys \
             with more than one life",
            self.keys - self.let_go,
            self.final_requests,
            self.first_run_in_final,
            self.let_go,
            self.swept,
            self.orders,
            self.payments,
            self.charges,
            self.provider_calls,
            self.receipts,
            self.caught_in_progress,
            self.finished_then_relived,
            self.relived
        )
    }
}

pub(crate) async fn check(
    load: &Arc<Load>,
    bases: &[String],
    url: &str,
    jumps: &[Jump],
) -> Result<Report, String> {
    let ops = load.ops();
    let mut report = Report {
        keys: ops.len(),
        ..Report::default()
    };
    let before_final = load.attempts().len();
    let mut catches: HashMap<(&str, &str), Vec<(Duration, &Caught)>> = HashMap::new();
    for jump in jumps {
        for caught in &jump.caught {
            catches
                .entry((caught.scope.as_str(), caught.key.as_str()))
                .or_default()
                .push((jump.at, caught));
        }
    }

    // A key whose clients got its outcome and whose record a jump then let go (swept, or
    // due to be) is done: a retry now would be a new operation, which tells nothing more
    // and would leave the key with two lives to judge instead of one.
    let retained = retained_keys(url).await?;
    let answered: BTreeSet<usize> = load
        .attempts()
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Answer { status, .. } if (200..300).contains(&status) || status == 402))
        .map(|a| a.op)
        .collect();
    let let_go = |index: usize, op: &Op| {
        let scope = op.account.to_string();
        answered.contains(&index)
            && !retained.contains(&(scope.clone(), op.key.clone()))
            && catches
                .get(&(scope.as_str(), op.key.as_str()))
                .is_some_and(|c| c.iter().any(|(_, c)| c.completed))
    };

    // Every other key, retried like a patient client until it has an outcome. A 422
    // means another body of the key won: that one is tried next.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(PARALLEL)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let permits = Arc::new(Semaphore::new(PARALLEL));
    let mut tasks = Vec::new();
    for (index, op) in ops.iter().cloned().enumerate() {
        if let_go(index, &op) {
            report.let_go += 1;
            continue;
        }
        let (http, load, permits) = (http.clone(), Arc::clone(load), Arc::clone(&permits));
        let base = bases[index % bases.len()].clone();
        let op_name = (op.account, op.key.clone());
        tasks.push((
            op_name,
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await;
                complete(&http, &base, &load, index, &op).await
            }),
        ));
    }
    for ((account, key), task) in tasks {
        if !task.await.map_err(|e| format!("checker task: {e}"))? {
            report.violations.push(format!(
                "account {account} key {key}: no outcome within {PATIENCE:?} of retries"
            ));
        }
    }
    let attempts = load.attempts();
    report.final_requests = attempts.len() - before_final;
    report.first_run_in_final = attempts[before_final..]
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Answer { replayed: false, status, .. } if status != 422 && is_final(&a.outcome)))
        .count();

    let mut by_op: Vec<Vec<&Attempt>> = vec![Vec::new(); ops.len()];
    for attempt in &attempts {
        by_op[attempt.op].push(attempt);
    }
    let db = Database::read(url).await?;
    report.orders = db.orders.len();
    report.payments = db.payments.len();
    report.charges = db.charges.len();
    report.provider_calls = db.charges.iter().map(|c| i64::from(c.3)).sum();
    report.receipts = db.receipts.len();
    let effects = Effects::of(&ops, &db, &mut report.violations);
    for (index, op) in ops.iter().enumerate() {
        let scope = op.account.to_string();
        let key = Key {
            op,
            name: format!("account {} key {}", op.account, op.key),
            attempts: &by_op[index],
            catches: catches
                .get(&(scope.as_str(), op.key.as_str()))
                .map_or(&[], Vec::as_slice),
            stored: db.keys.get(&(scope.clone(), op.key.clone())),
            effects: &effects[index],
        };
        key.check(&db, &mut report);
    }
    for (scope, key, state, ..) in db.keys.values() {
        if state != "completed" {
            report
                .violations
                .push(format!("account {scope} key {key}: left {state}"));
        }
    }
    for (payment, count) in &db.receipts {
        if *count > 1 {
            report.violations.push(format!(
                "payment {payment}: {count} receipts (one outbox message per payment)"
            ));
        }
    }
    Ok(report)
}

impl Key<'_> {
    fn check(&self, db: &Database, report: &mut Report) {
        let lives = self.lives();
        if lives.len() > 1 {
            report.relived += 1;
        }
        if self.catches.iter().any(|(_, c)| !c.completed) {
            report.caught_in_progress += 1;
        }
        let (outcome, seen) = self.answers(lives.len() == 1, &mut report.violations);
        let violations = &mut report.violations;
        let charged_lives = match self.op.form {
            Form::Payment => self.check_payments(&lives, violations),
            Form::Order => HashMap::new(),
        };
        let ended_after_finishing = self.count_effects(&charged_lives, violations);
        if ended_after_finishing > 0 {
            report.finished_then_relived += 1;
        }
        self.check_stored(
            db,
            lives.len() == 1,
            outcome,
            &seen,
            violations,
            &mut report.swept,
        );
    }
}
