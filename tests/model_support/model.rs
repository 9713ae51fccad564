//! The reference model: what each operation must answer, given what it answered before,
//! and the check of every answer against it.

use std::collections::{HashMap, HashSet};

use actix_web::web::Bytes;
use proptest::test_runner::TestCaseError;

use super::steps::SCOPES;
use crate::support::Reply;

/// One operation of the model: a key from its first use until it completes.
#[derive(Debug, Default)]
pub(crate) struct Op {
    pub(crate) variant: u8,
    /// The first final answer, `(status, body)`; every replay must equal it.
    pub(crate) original: Option<(u16, Bytes)>,
    /// The derived key its phases used, once one committed.
    pub(crate) derived: Option<String>,
    /// The retention ended (time was moved past it).
    pub(crate) retention_over: bool,
}

/// What the model knows, and what it saw happen.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) ops: HashMap<(i64, String), Op>,
    /// Derived keys of operations that ended; they must never be used again.
    pub(crate) retired: HashSet<String>,
}

impl Op {
    /// Records the operation's first final answer, checking that a 201 was given for the
    /// operation's own scope, with the derived key both phases saw and the operation had.
    fn record(
        &mut self,
        id: &(i64, String),
        status: u16,
        body: Bytes,
    ) -> Result<(), TestCaseError> {
        if status == 201 {
            let answer: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| TestCaseError::fail(format!("{id:?}: answer {body:?}: {e}")))?;
            check!(
                answer["scope"] == id.0,
                "{id:?}: answered for scope {}",
                answer["scope"]
            );
            let derived = answer["a"].as_str().unwrap_or_default().to_owned();
            check!(
                answer["b"] == derived.as_str(),
                "{id:?}: phases a and b saw different derived keys"
            );
            match &self.derived {
                Some(known) => check!(
                    *known == derived,
                    "{id:?}: the answer's derived key {derived} is not the operation's {known}"
                ),
                None => self.derived = Some(derived),
            }
        }
        self.original = Some((status, body));
        Ok(())
    }
}

impl Model {
    /// Before a request: a completed key past its retention starts a new operation.
    /// Returns whether the request starts one (no operation of the key was under way).
    pub(crate) fn begin(&mut self, scope: usize, key: u8, variant: u8) -> bool {
        let id = (SCOPES[scope], format!("k{key}"));
        let ended = self
            .ops
            .get(&id)
            .is_some_and(|op| op.original.is_some() && op.retention_over);
        if ended {
            let op = self.ops.remove(&id).expect("present");
            self.retired.extend(op.derived);
        }
        let fresh = !self.ops.contains_key(&id);
        self.ops.entry(id).or_insert_with(|| Op {
            variant,
            ..Op::default()
        });
        fresh
    }

    /// After a request was dropped without its answer, once its connections are back:
    /// `in_progress` tells whether the key's row is there and not completed, `stored` is
    /// the answer it holds if it is completed within its retention. A dropped request
    /// that got past its claim leaves the key in progress for a retry (with whatever
    /// phases it committed); one that got as far as the completion stored a final
    /// answer, which every retry must replay; one that did neither left no trace, and
    /// the operation it would have started never began.
    pub(crate) fn cut(
        &mut self,
        scope: usize,
        key: u8,
        variant: u8,
        fresh: bool,
        in_progress: bool,
        stored: Option<(u16, Bytes)>,
    ) -> Result<(), TestCaseError> {
        let id = (SCOPES[scope], format!("k{key}"));
        if fresh && !in_progress && stored.is_none() {
            self.ops.remove(&id);
            return Ok(());
        }
        let op = self.ops.get_mut(&id).expect("begun");
        if let Some((original_status, original_body)) = &op.original {
            check!(
                stored
                    .as_ref()
                    .is_some_and(|(s, b)| s == original_status && b == original_body),
                "{id:?}: under a dropped request the stored answer became {stored:?}; it was \
                 {original_status} {original_body:?}"
            );
            return Ok(());
        }
        let Some((status, body)) = stored else {
            return Ok(());
        };
        check!(
            variant == op.variant,
            "{id:?}: a dropped request with another body stored {status} {body:?}"
        );
        check!(
            matches!(status, 201 | 402),
            "{id:?}: a dropped request stored {status} {body:?}"
        );
        // The completion gave the key a fresh retention.
        op.retention_over = false;
        op.record(&id, status, body)
    }

    /// Checks one answer against the model.
    /// `concurrent`: sent beside copies of itself, so a 409 (a copy holds the key) is
    /// always a right answer.
    pub(crate) fn answered(
        &mut self,
        scope: usize,
        key: u8,
        variant: u8,
        reply: &Reply,
        concurrent: bool,
    ) -> Result<(), TestCaseError> {
        let id = (SCOPES[scope], format!("k{key}"));
        let op = self.ops.get_mut(&id).expect("begun");
        let status = reply.status;
        if !reply.replayed() && !matches!(status, 409 | 422) {
            // An attempt ran: a claim or a takeover gives the key a fresh retention.
            op.retention_over = false;
        }
        if variant != op.variant {
            check!(
                status == 422,
                "{id:?}: another body under a live key got {status}, not 422"
            );
            return Ok(());
        }
        if concurrent && status == 409 {
            return Ok(());
        }
        if let Some((original_status, original_body)) = &op.original {
            check!(
                reply.replayed(),
                "{id:?}: a completed key within its retention answered {status} without replaying"
            );
            check!(
                status == *original_status && reply.body == *original_body,
                "{id:?}: the replay {status} {:?} differs from the original {original_status} {:?}",
                reply.body,
                original_body
            );
            return Ok(());
        }
        check!(
            !reply.replayed(),
            "{id:?}: a replay of an answer never given: {status}"
        );
        if matches!(status, 201 | 402) {
            op.record(&id, status, reply.body.clone())?;
        } else {
            check!(
                matches!(status, 409 | 500 | 503),
                "{id:?}: unexpected answer {status}: {:?}",
                reply.body
            );
        }
        Ok(())
    }
}
