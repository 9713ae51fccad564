//! The checker's retries: a key is sent again, like a patient client, until one of its
//! bodies gets an outcome.

use std::time::{Duration, Instant};

use crate::workload::{Attempt, Load, Op, Outcome, is_final, request, send};

/// How long the checker keeps retrying one body of one key.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);

/// Sends `op` until one of its bodies gets an outcome; false when none did in time.
pub(super) async fn complete(
    http: &reqwest::Client,
    base: &str,
    load: &Load,
    index: usize,
    op: &Op,
) -> bool {
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
