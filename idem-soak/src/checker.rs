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
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::faults::{Caught, Jump};
use crate::workload::{Attempt, Form, Load, Op, Outcome, is_final, request, send};

/// How long the checker keeps retrying one body of one key.
const PATIENCE: Duration = Duration::from_secs(60);
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

/// A row of `idem_keys`: scope, key, state, response status and body, generation and
/// `created_at` in microseconds.
type KeyRow = (
    String,
    String,
    String,
    Option<i16>,
    Option<Vec<u8>>,
    i64,
    i64,
);

/// A row of `payments`: id, account, amount, state, provider charge id.
type PaymentRow = (i64, i64, i64, String, Option<String>);

/// A row of `provider_charges`: id, provider key, amount, requests.
type ChargeRow = (i64, String, i64, i32);

/// A status and the body bytes.
type Answer = (u16, Vec<u8>);

/// A stored outcome as a client saw it.
struct Seen<'a> {
    body_index: usize,
    status: u16,
    replayed: bool,
    body: &'a [u8],
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

/// The keys in progress, and the completed ones within their retention: the records a
/// retry would find.
async fn retained_keys(url: &str) -> Result<BTreeSet<(String, String)>, String> {
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| format!("the checker cannot connect: {e}"))?;
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT scope, idem_key FROM idem_keys WHERE state = 'started' OR expires_at > now()",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("read idem_keys: {e}"))?;
    pool.close().await;
    Ok(keys.into_iter().collect())
}

/// Sends `op` until one of its bodies gets an outcome; false when none did in time.
async fn complete(http: &reqwest::Client, base: &str, load: &Load, index: usize, op: &Op) -> bool {
    for body in 0..op.bodies.len() {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let outcome = send(request(http, base, op, body, Duration::from_secs(30))).await;
            let status = match &outcome {
                Outcome::Answer { status, .. } if is_final(&outcome) => Some(*status),
                _ => None,
            };
            load.record(Attempt {
                op: index,
                body,
                outcome,
            });
            match status {
                Some(422) => break,
                Some(_) => return true,
                None if Instant::now() >= deadline => break,
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    false
}

/// What the database holds at the end.
struct Database {
    /// By (scope, key).
    keys: HashMap<(String, String), KeyRow>,
    /// id, account, item.
    orders: Vec<(i64, i64, String)>,
    payments: Vec<PaymentRow>,
    charges: Vec<ChargeRow>,
    /// Receipts per payment id.
    receipts: HashMap<i64, i64>,
}

impl Database {
    async fn read(url: &str) -> Result<Self, String> {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("the checker cannot connect: {e}"))?;
        let read = |what: &str, e: sqlx::Error| format!("read {what}: {e}");
        let orders = sqlx::query_as("SELECT id, account_id, item FROM orders ORDER BY id")
            .fetch_all(&pool)
            .await
            .map_err(|e| read("orders", e))?;
        let keys: Vec<KeyRow> = sqlx::query_as(
            "SELECT scope, idem_key, state, response_status, response_body, generation, \
                    (extract(epoch FROM created_at) * 1000000)::bigint \
               FROM idem_keys",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("idem_keys", e))?;
        let payments = sqlx::query_as(
            "SELECT id, account_id, amount_cents, state, provider_charge_id FROM payments \
              ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("payments", e))?;
        let charges = sqlx::query_as(
            "SELECT id, provider_key, amount_cents, requests FROM provider_charges ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("provider_charges", e))?;
        let receipts: Vec<(i64, i64)> =
            sqlx::query_as("SELECT payment_id, count(*) FROM receipts GROUP BY payment_id")
                .fetch_all(&pool)
                .await
                .map_err(|e| read("receipts", e))?;
        pool.close().await;
        Ok(Self {
            keys: keys
                .into_iter()
                .map(|row| ((row.0.clone(), row.1.clone()), row))
                .collect(),
            orders,
            payments,
            charges,
            receipts: receipts.into_iter().collect(),
        })
    }
}

/// The business rows of each operation: orders name their key (the item), payments and
/// charges their body (each payment body has an amount of its own).
#[derive(Default)]
struct Effects<'a> {
    orders: Vec<i64>,
    payments: Vec<&'a PaymentRow>,
    charges: Vec<&'a ChargeRow>,
}

impl<'a> Effects<'a> {
    /// The rows of each operation, by index; a row no operation sent is a violation.
    fn of(ops: &[Op], db: &'a Database, violations: &mut Vec<String>) -> Vec<Effects<'a>> {
        let mut of_op: Vec<Effects<'a>> = ops.iter().map(|_| Effects::default()).collect();
        let mut order_owner = HashMap::new();
        let mut amount_owner = HashMap::new();
        for (index, op) in ops.iter().enumerate() {
            match op.form {
                Form::Order => {
                    order_owner.insert((op.account, op.key.as_str()), index);
                }
                Form::Payment => {
                    for body in &op.bodies {
                        let amount = serde_json::from_str::<serde_json::Value>(body)
                            .ok()
                            .and_then(|v| v["amount_cents"].as_i64());
                        if let Some(amount) = amount {
                            amount_owner.insert(amount, index);
                        }
                    }
                }
            }
        }
        for (id, account, item) in &db.orders {
            match order_owner.get(&(*account, item.as_str())) {
                Some(&index) => of_op[index].orders.push(*id),
                None => violations.push(format!(
                    "order {id} (account {account}, {item}): no client sent this order"
                )),
            }
        }
        for payment in &db.payments {
            let (id, account, amount, ..) = payment;
            match amount_owner.get(amount) {
                Some(&index) if ops[index].account == *account => {
                    of_op[index].payments.push(payment);
                }
                _ => violations.push(format!(
                    "payment {id} (account {account}, {amount} cents): no client of this \
                     account sent this payment"
                )),
            }
        }
        for charge in &db.charges {
            let (id, provider_key, amount, _) = charge;
            match amount_owner.get(amount) {
                Some(&index) => of_op[index].charges.push(charge),
                None => violations.push(format!(
                    "provider charge {id} ({provider_key}, {amount} cents): no payment was \
                     sent for it"
                )),
            }
        }
        of_op
    }
}

/// Everything known about one operation's key.
struct Key<'a> {
    op: &'a Op,
    name: String,
    attempts: &'a [&'a Attempt],
    /// When each jump caught the key, and how.
    catches: &'a [(Duration, &'a Caught)],
    stored: Option<&'a KeyRow>,
    effects: &'a Effects<'a>,
}

impl Key<'_> {
    /// The lives of the key: a phased key's generation, a single-transaction key's
    /// creation time (idem gave single-transaction rows generation 0 until it sealed
    /// stored responses to the generation, and such rows may still be around).
    fn life(&self, generation: i64, created_at: i64) -> i64 {
        match self.op.form {
            Form::Order => created_at,
            Form::Payment => generation,
        }
    }

    fn lives(&self) -> BTreeSet<i64> {
        let mut lives: BTreeSet<i64> = self
            .catches
            .iter()
            .map(|(_, c)| self.life(c.generation, c.created_at))
            .collect();
        if let Some((.., generation, created_at)) = self.stored {
            lives.insert(self.life(*generation, *created_at));
        }
        lives
    }

    fn final_life(&self) -> Option<i64> {
        self.stored
            .map(|(.., generation, created_at)| self.life(*generation, *created_at))
    }

    /// The jumps that caught the key, for a violation's message.
    fn history(&self) -> String {
        let caught: Vec<String> = self
            .catches
            .iter()
            .map(|(at, c)| {
                format!(
                    "{} at {:.1} s (generation {}{})",
                    if c.completed {
                        "completed"
                    } else {
                        "in progress"
                    },
                    at.as_secs_f64(),
                    c.generation,
                    if c.lease_ended { ", lease ended" } else { "" }
                )
            })
            .collect();
        match self.stored {
            Some((_, _, state, .., generation, _)) => format!(
                "caught {}; now {state}, generation {generation}",
                caught.join(", ")
            ),
            None => format!("caught {}; now gone", caught.join(", ")),
        }
    }

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

    /// The answers to the key agree. With one life: one execution at most, every stored
    /// outcome the same bytes, all for one body, and 422 only for the other bodies. With
    /// more, each life has its own answer and may be owned by another body, so only the
    /// statuses are checked here. Returns the outcome (the first seen) and every
    /// distinct outcome seen.
    fn answers(
        &self,
        one_life: bool,
        violations: &mut Vec<String>,
    ) -> (Option<Answer>, Vec<Answer>) {
        let name = &self.name;
        let mut seen = Vec::new();
        let mut mismatched = Vec::new();
        for attempt in self.attempts {
            if let Outcome::Answer {
                status,
                replayed,
                body,
            } = &attempt.outcome
            {
                match status {
                    409 | 500.. => {}
                    422 => mismatched.push(attempt.body),
                    200..=299 | 402 => seen.push(Seen {
                        body_index: attempt.body,
                        status: *status,
                        replayed: *replayed,
                        body,
                    }),
                    other => violations.push(format!(
                        "{name}: unexpected {other}: {}",
                        String::from_utf8_lossy(body)
                    )),
                }
            }
        }
        let mut distinct: Vec<Answer> = Vec::new();
        for s in &seen {
            if !distinct
                .iter()
                .any(|(st, b)| *st == s.status && b == s.body)
            {
                distinct.push((s.status, s.body.to_vec()));
            }
        }
        let Some(first) = seen.first() else {
            return (None, distinct);
        };
        if one_life {
            let executions = seen.iter().filter(|s| !s.replayed).count();
            if executions > 1 {
                violations.push(format!("{name}: the handler ran {executions} times"));
            }
            for other in &seen[1..] {
                if other.status != first.status || other.body != first.body {
                    violations.push(format!(
                        "{name}: a replay differs from the original: {} {:?} against {} {:?}",
                        other.status,
                        String::from_utf8_lossy(other.body),
                        first.status,
                        String::from_utf8_lossy(first.body)
                    ));
                }
                if other.body_index != first.body_index {
                    violations.push(format!(
                        "{name}: bodies {} and {} both got an outcome",
                        first.body_index, other.body_index
                    ));
                }
            }
            if mismatched.contains(&first.body_index) {
                violations.push(format!("{name}: the body that owns the key got 422"));
            }
        }
        (Some((first.status, first.body.to_vec())), distinct)
    }

    /// Each provider charge belongs to one life of the key (its provider key is the
    /// derived key of that generation), each life has at most one charge and one payment,
    /// and every payment finished (after the checker's retries nothing may be left half
    /// done). Returns the lives with their succeeded payment.
    fn check_payments(
        &self,
        lives: &BTreeSet<i64>,
        violations: &mut Vec<String>,
    ) -> HashMap<i64, i64> {
        let name = &self.name;
        let scope = self.op.account.to_string();
        let derived: HashMap<String, i64> = lives
            .iter()
            .map(|&g| (derive_key(&scope, &self.op.key, g, "charge"), g))
            .collect();
        let mut life_of_charge = HashMap::new();
        let mut charges_of_life: HashMap<i64, Vec<i64>> = HashMap::new();
        for (id, provider_key, ..) in &self.effects.charges {
            match derived.get(provider_key) {
                Some(&life) => {
                    life_of_charge.insert(format!("ch_{id}"), life);
                    charges_of_life.entry(life).or_default().push(*id);
                }
                None => violations.push(format!(
                    "{name}: provider charge {id} has provider key {provider_key}, the \
                     derived key of no generation the key had ({lives:?}): an operation \
                     started again without its key being swept or reclaimed; {}",
                    self.history()
                )),
            }
        }
        for (life, charges) in &charges_of_life {
            if charges.len() > 1 {
                violations.push(format!(
                    "{name}: generation {life} charged {} times: {charges:?}",
                    charges.len()
                ));
            }
        }
        let mut payments_of_life: HashMap<i64, Vec<i64>> = HashMap::new();
        let mut succeeded = HashMap::new();
        for (id, _, _, state, charge) in &self.effects.payments {
            let life = charge.as_ref().and_then(|c| life_of_charge.get(c));
            if state != "succeeded" {
                violations.push(format!(
                    "{name}: payment {id} left {state} (charge {charge:?}): its operation was \
                     abandoned, not resumed; {}",
                    self.history()
                ));
            }
            match life {
                Some(&life) => {
                    payments_of_life.entry(life).or_default().push(*id);
                    if state == "succeeded" {
                        succeeded.insert(life, *id);
                    }
                }
                None if charge.is_some() => violations.push(format!(
                    "{name}: payment {id} names charge {charge:?}, not one of its key's"
                )),
                None => {}
            }
        }
        for (life, payments) in &payments_of_life {
            if payments.len() > 1 {
                violations.push(format!(
                    "{name}: generation {life} has {} payments: {payments:?}",
                    payments.len()
                ));
            }
        }
        succeeded
    }

    /// At most one business effect per operation: 1 + the lives a jump caught completed
    /// (each such life may have been swept or reclaimed, and the next use of the key is a
    /// new operation) + the lives a jump caught in progress that finished and then ended
    /// (they ended as completed keys do). A life caught in progress that never finished
    /// must be resumed, so it never counts. Returns that last number.
    fn count_effects(&self, finished: &HashMap<i64, i64>, violations: &mut Vec<String>) -> usize {
        let caught_completed: BTreeSet<i64> = self
            .catches
            .iter()
            .filter(|(_, c)| c.completed)
            .map(|(_, c)| self.life(c.generation, c.created_at))
            .collect();
        let final_life = self.final_life();
        let finished_then_ended = self
            .catches
            .iter()
            .map(|(_, c)| self.life(c.generation, c.created_at))
            .filter(|life| {
                !caught_completed.contains(life)
                    && Some(*life) != final_life
                    && finished.contains_key(life)
            })
            .collect::<BTreeSet<_>>()
            .len();
        let allowed = 1 + caught_completed.len() + finished_then_ended;
        let (what, count) = match self.op.form {
            Form::Order => ("orders", self.effects.orders.len()),
            Form::Payment => ("payments", self.effects.payments.len()),
        };
        let because = format!(
            "{} lives caught completed by a jump, {finished_then_ended} caught in progress \
             that finished and ended; {}",
            caught_completed.len(),
            self.history()
        );
        if count > allowed {
            violations.push(format!(
                "{}: {count} {what}, at most {allowed} allowed ({because})",
                self.name
            ));
        }
        if self.op.form == Form::Payment {
            let keys: BTreeSet<&str> = self.effects.charges.iter().map(|c| c.1.as_str()).collect();
            if keys.len() > allowed {
                violations.push(format!(
                    "{}: {} provider keys charged, at most {allowed} allowed ({because})",
                    self.name,
                    keys.len()
                ));
            }
        }
        finished_then_ended
    }

    /// The stored answer against the answers and the rows: with one life, it is the one
    /// the clients got, with one order or payment for a 201 and none otherwise; with more,
    /// it is one that a client or the checker got, and every 201 names a row of the key.
    fn check_stored(
        &self,
        db: &Database,
        one_life: bool,
        outcome: Option<Answer>,
        seen: &[Answer],
        violations: &mut Vec<String>,
        swept: &mut usize,
    ) {
        let name = &self.name;
        let rows: Vec<i64> = match self.op.form {
            Form::Order => self.effects.orders.clone(),
            Form::Payment => self.effects.payments.iter().map(|p| p.0).collect(),
        };
        let names_a_row = |body: &[u8]| {
            serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["id"].as_i64())
                .filter(|id| rows.contains(id))
        };
        for (status, body) in seen {
            if *status == 201 && names_a_row(body).is_none() {
                violations.push(format!(
                    "{name}: a client got a 201 naming no row of the key: {}",
                    String::from_utf8_lossy(body)
                ));
            }
        }
        let Some((outcome_status, outcome_body)) = outcome else {
            return; // reported by the retries already
        };
        let stored = match self.stored {
            Some((_, _, state, Some(status), Some(body), ..)) if state == "completed" => {
                (*status, body)
            }
            None if self.catches.iter().any(|(_, c)| c.completed) => {
                // Swept after a jump caught it completed: only the rows are left to check.
                *swept += 1;
                let expected = usize::from(outcome_status == 201);
                if one_life && rows.len() != expected {
                    violations.push(format!(
                        "{name}: answered {outcome_status} but has {} rows {rows:?}",
                        rows.len()
                    ));
                }
                return;
            }
            _ => {
                violations.push(format!(
                    "{name}: answered, but no completed key is stored (lost)"
                ));
                return;
            }
        };
        let (stored_status, stored_body) = stored;
        let stored_status = u16::try_from(stored_status).unwrap_or_default();
        if stored_status == 201 && names_a_row(stored_body).is_none() {
            violations.push(format!(
                "{name}: the stored answer names no row of the key: {}",
                String::from_utf8_lossy(stored_body)
            ));
        }
        if self.op.form == Form::Payment
            && let Some(id) = (stored_status == 201)
                .then(|| names_a_row(stored_body))
                .flatten()
            && db.payments.iter().any(|p| p.0 == id && p.3 != "succeeded")
        {
            violations.push(format!(
                "{name}: the stored answer names payment {id}, which did not succeed"
            ));
        }
        if one_life {
            if stored_status != outcome_status || *stored_body != outcome_body {
                violations.push(format!(
                    "{name}: the stored answer is not the one the clients got"
                ));
            }
            let expected = usize::from(outcome_status == 201);
            if rows.len() != expected {
                violations.push(format!(
                    "{name}: answered {outcome_status} but has {} rows {rows:?}",
                    rows.len()
                ));
            }
            if self.op.form == Form::Payment && outcome_status == 201 {
                let charges = self.effects.charges.len();
                if charges != 1 {
                    violations.push(format!(
                        "{name}: one payment but {charges} provider charges"
                    ));
                }
            }
        } else if !seen
            .iter()
            .any(|(status, body)| *status == stored_status && body == stored_body)
        {
            violations.push(format!(
                "{name}: the stored answer ({stored_status}) is none that a client or the \
                 checker got"
            ));
        }
    }
}

/// The key a phased handler sends to a provider for `step`, recomputed here from its
/// documented format (README, "Keys for other services"), so the checker does not take
/// the runtime's word for which generation a charge belongs to.
fn derive_key(scope: &str, key: &str, generation: i64, step: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem derived key v1");
    for part in [scope.as_bytes(), key.as_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.update(generation.to_be_bytes());
    hasher.update((step.len() as u64).to_be_bytes());
    hasher.update(step.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    // Version 8 and the RFC 9562 variant, as the format says.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
