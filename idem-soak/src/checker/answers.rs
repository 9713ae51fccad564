//! The answers the clients got for a key, checked against each other and against the
//! answer stored for it.

use super::database::Database;
use super::key::Key;
use crate::workload::{Form, Outcome};

/// A status and the body bytes.
pub(super) type Answer = (u16, Vec<u8>);

/// A stored outcome as a client saw it.
struct Seen<'a> {
    body_index: usize,
    status: u16,
    replayed: bool,
    body: &'a [u8],
}

impl Key<'_> {
    /// The answers to the key agree. With one life: one execution at most, every stored
    /// outcome the same bytes, all for one body, and 422 only for the other bodies. With
    /// more, each life has its own answer and may be owned by another body, so only the
    /// statuses are checked here. Returns the outcome (the first seen) and every
    /// distinct outcome seen.
    pub(super) fn answers(
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

    /// The stored answer against the answers and the rows: with one life, it is the one
    /// the clients got, with one order or payment for a 201 and none otherwise; with more,
    /// it is one that a client or the checker got, and every 201 names a row of the key.
    pub(super) fn check_stored(
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
