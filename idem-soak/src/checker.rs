//! The checker: retries every key until it completes, then compares the recorded answers
//! with each other and with what the database holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::workload::{Attempt, Load, Op, Outcome, is_final, request, send};

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
    final_requests: usize,
    first_run_in_final: usize,
}

impl Report {
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} keys retried until complete ({} requests; {} of them ran only now, their \
             earlier attempts having all failed or been abandoned); {} orders in the \
             database",
            self.keys, self.final_requests, self.first_run_in_final, self.orders
        )
    }
}

/// A row of `idem_keys`: scope, key, state, response status and body.
type KeyRow = (String, String, String, Option<i16>, Option<Vec<u8>>);

/// A stored outcome as a client saw it.
struct Seen<'a> {
    body_index: usize,
    status: u16,
    replayed: bool,
    body: &'a [u8],
}

pub(crate) async fn check(load: &Arc<Load>, bases: &[String], url: &str) -> Result<Report, String> {
    let ops = load.ops();
    let mut report = Report {
        keys: ops.len(),
        ..Report::default()
    };
    let before_final = load.attempts().len();

    // Every key, retried like a patient client until it has an outcome. A 422 means
    // another body of the key won: that one is tried next.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(PARALLEL)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let permits = Arc::new(Semaphore::new(PARALLEL));
    let mut tasks = Vec::new();
    for (index, op) in ops.iter().cloned().enumerate() {
        let (http, load, permits) = (http.clone(), Arc::clone(load), Arc::clone(&permits));
        let base = bases[index % bases.len()].clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            complete(&http, &base, &load, index, &op).await
        }));
    }
    for (task, op) in tasks.into_iter().zip(&ops) {
        if !task.await.map_err(|e| format!("checker task: {e}"))? {
            report.violations.push(format!(
                "account {} key {}: no outcome within {PATIENCE:?} of retries",
                op.account, op.key
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
    let mut outcome_of: Vec<Option<(u16, Vec<u8>)>> = vec![None; ops.len()];
    for (index, op) in ops.iter().enumerate() {
        outcome_of[index] = check_answers(op, &by_op[index], &mut report.violations);
    }
    check_database(url, &ops, &outcome_of, &mut report).await?;
    Ok(report)
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

/// The answers to one key agree: one execution at most, every stored outcome the same
/// bytes, all for one body, and 422 only for the other bodies. Returns the outcome.
fn check_answers(
    op: &Op,
    attempts: &[&Attempt],
    violations: &mut Vec<String>,
) -> Option<(u16, Vec<u8>)> {
    let name = format!("account {} key {}", op.account, op.key);
    let mut seen = Vec::new();
    let mut mismatched = Vec::new();
    for attempt in attempts {
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
    let first = seen.first()?;
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
    Some((first.status, first.body.to_vec()))
}

/// Order rows and key rows against each other and against the answers.
async fn check_database(
    url: &str,
    ops: &[Op],
    outcome_of: &[Option<(u16, Vec<u8>)>],
    report: &mut Report,
) -> Result<(), String> {
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| format!("the checker cannot connect: {e}"))?;
    let orders: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT id, account_id, item FROM orders ORDER BY id")
            .fetch_all(&pool)
            .await
            .map_err(|e| format!("read orders: {e}"))?;
    let keys: Vec<KeyRow> = sqlx::query_as(
        "SELECT scope, idem_key, state, response_status, response_body FROM idem_keys",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("read idem_keys: {e}"))?;
    pool.close().await;
    report.orders = orders.len();
    let violations = &mut report.violations;

    // At most one business effect per (scope, key): the item is the key.
    let mut rows_of: HashMap<(String, String), Vec<i64>> = HashMap::new();
    for (id, account, item) in &orders {
        rows_of
            .entry((account.to_string(), item.clone()))
            .or_default()
            .push(*id);
    }
    for ((scope, key), ids) in &rows_of {
        if ids.len() > 1 {
            violations.push(format!(
                "account {scope} key {key}: {} orders {ids:?}",
                ids.len()
            ));
        }
    }

    let key_rows: HashMap<(&str, &str), _> = keys
        .iter()
        .map(|(scope, key, state, status, body)| {
            ((scope.as_str(), key.as_str()), (state, status, body))
        })
        .collect();
    for (scope, key, state, _, _) in &keys {
        if state != "completed" {
            violations.push(format!("account {scope} key {key}: left {state}"));
        }
    }
    // No business row without its completed key, whose stored answer names that row.
    for (id, account, item) in &orders {
        let scope = account.to_string();
        match key_rows.get(&(scope.as_str(), item.as_str())) {
            Some((state, Some(201), Some(body))) if *state == "completed" => {
                let named = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v["id"].as_i64());
                if named != Some(*id) {
                    violations.push(format!(
                        "order {id} (account {account}, {item}): its key's answer names order {named:?}"
                    ));
                }
            }
            other => violations.push(format!(
                "order {id} (account {account}, {item}) has no completed key: {:?}",
                other.map(|(state, status, _)| (state, status))
            )),
        }
    }
    // Every outcome the clients saw is the one stored, with its order when it is a 201.
    for (op, outcome) in ops.iter().zip(outcome_of) {
        let scope = op.account.to_string();
        let stored = key_rows.get(&(scope.as_str(), op.key.as_str()));
        let rows = rows_of
            .get(&(scope.clone(), op.key.clone()))
            .map_or(0, Vec::len);
        match (outcome, stored) {
            (Some((status, body)), Some((_, Some(stored_status), Some(stored_body)))) => {
                if i32::from(*stored_status) != i32::from(*status) || stored_body != body {
                    violations.push(format!(
                        "account {} key {}: the stored answer is not the one the clients got",
                        op.account, op.key
                    ));
                }
                let expected_rows = usize::from(*status == 201);
                if rows != expected_rows {
                    violations.push(format!(
                        "account {} key {}: answered {status} but has {rows} orders",
                        op.account, op.key
                    ));
                }
            }
            (Some(_), _) => violations.push(format!(
                "account {} key {}: answered, but no completed key is stored (lost)",
                op.account, op.key
            )),
            (None, _) => {} // reported by the retries already
        }
    }
    Ok(())
}
