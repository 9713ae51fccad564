//! A key's business rows against its lives: which life each provider charge and payment
//! belongs to (by the derived key), and how many orders or payments an operation may leave.

use std::collections::{BTreeSet, HashMap};

use sha2::{Digest, Sha256};

use super::key::Key;
use crate::workload::Form;

impl Key<'_> {
    /// Each provider charge belongs to one life of the key (its provider key is the
    /// derived key of that generation), each life has at most one charge and one payment,
    /// and every payment finished (after the checker's retries nothing may be left half
    /// done). Returns the lives with their succeeded payment.
    pub(super) fn check_payments(
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
    pub(super) fn count_effects(
        &self,
        finished: &HashMap<i64, i64>,
        violations: &mut Vec<String>,
    ) -> usize {
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
}

/// The key a phased handler sends to a provider for `step`, recomputed here from its
/// documented format (`docs/guide/phased.md`, "Keys for other services"), so the checker does not take
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
