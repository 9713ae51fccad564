//! The model of the single-transaction form (`model_single.rs`): its steps and their
//! generator, the reference model and its check of every answer. The handler is in
//! `handler`, the run that drives the runtime through a sequence in `run`.
//!
//! In this form an attempt either commits its business write together with its stored
//! answer or rolls both back: there is no state in between for a retry to resume. So the
//! model is an answer per operation, and the database is checked against it after every
//! step: the effects committed are exactly those named by the operations' stored answers.

pub(crate) mod handler;
pub(crate) mod run;

use std::collections::{HashMap, HashSet};

use actix_web::web::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::steps::SCOPES;
use crate::support::Reply;

/// How a handler attempt behaves, after it wrote its effect through `idem::Tx`; sent in
/// a header, so it is not part of the request's fingerprint and a retry of the same
/// request may behave differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answers 201: the effect commits with the answer, which replays.
    Created,
    /// Answers 201 with a body over 64 KiB, which PostgreSQL stages with `COPY` before
    /// the completion.
    CreatedLarge,
    /// Answers 402: a final answer too, committed and replayed.
    Declined,
    /// Answers 429, a transient status: rolled back like a failure.
    Throttled,
    /// Answers 503: rolled back; the key stays free for a retry.
    Fails,
    /// Panics: rolled back, answered 500 by idem.
    Panics,
    /// The process dies before answering: the request is dropped mid-handler.
    Dies,
}

impl Outcome {
    pub(crate) const ALL: [Self; 7] = [
        Self::Created,
        Self::CreatedLarge,
        Self::Declined,
        Self::Throttled,
        Self::Fails,
        Self::Panics,
        Self::Dies,
    ];

    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::CreatedLarge => "created-large",
            Self::Declined => "declined",
            Self::Throttled => "throttled",
            Self::Fails => "fails",
            Self::Panics => "panics",
            Self::Dies => "dies",
        }
    }

    /// The outcome the `x-outcome` header's value names: `Created` without one.
    pub(crate) fn from_header(value: Option<&[u8]>) -> Self {
        let value = value.unwrap_or(b"created");
        Self::ALL
            .into_iter()
            .find(|o| o.header().as_bytes() == value)
            .unwrap_or(Self::Created)
    }

    /// The status the handler answers with; `None` when it does not answer.
    pub(crate) fn status(self) -> Option<u16> {
        match self {
            Self::Created | Self::CreatedLarge => Some(201),
            Self::Declined => Some(402),
            Self::Throttled => Some(429),
            Self::Fails => Some(503),
            Self::Panics | Self::Dies => None,
        }
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// One request: scope index, key index, body variant, outcome.
    Send(usize, u8, u8, Outcome),
    /// Copies of one request sent at once (outcomes that answer).
    Concurrent(usize, u8, u8, Outcome, usize),
    /// Both bodies under one key at once: a client that reused a key for another request
    /// while the first was in flight.
    Race(usize, u8, Outcome),
    /// A request whose process dies mid-handler, with copies of it (of an outcome that
    /// answers) sent beside it: the copies waiting for its key go on once it is gone.
    DiesBeside(usize, u8, u8, Outcome, usize),
    /// The same key name and body from both tenants at once: two requests that share
    /// nothing, neither of which may wait for or answer from the other.
    Tenants(u8, u8, Outcome),
    /// One request (of an outcome that answers) dropped after its future was polled this
    /// many times, as a client that disconnects or a process that dies at any point of
    /// the claim, the handler, the completion or the commit. What it left is read from
    /// the database once its connections are back in the pool.
    Cut(usize, u8, u8, Outcome, u8),
    /// The key's retention ends now.
    RetentionEnds(usize, u8),
    /// One expiry sweep.
    Sweep,
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    let scope = 0..SCOPES.len();
    let key = 0..3u8;
    // Mostly the same body, so that retries and replays happen.
    let variant = prop_oneof![4 => Just(0u8), 1 => Just(1u8)];
    let outcome = proptest::sample::select(Outcome::ALL.to_vec());
    let answering = proptest::sample::select(
        Outcome::ALL
            .into_iter()
            .filter(|o| *o != Outcome::Dies)
            .collect::<Vec<_>>(),
    );
    prop_oneof![
        8 => (scope.clone(), key.clone(), variant.clone(), outcome)
            .prop_map(|(s, k, v, o)| Step::Send(s, k, v, o)),
        2 => (scope.clone(), key.clone(), variant.clone(), answering.clone(), 2..4usize)
            .prop_map(|(s, k, v, o, n)| Step::Concurrent(s, k, v, o, n)),
        1 => (scope.clone(), key.clone(), answering.clone())
            .prop_map(|(s, k, o)| Step::Race(s, k, o)),
        1 => (scope.clone(), key.clone(), variant.clone(), answering.clone(), 1..3usize)
            .prop_map(|(s, k, v, o, n)| Step::DiesBeside(s, k, v, o, n)),
        1 => (key.clone(), variant.clone(), answering.clone())
            .prop_map(|(k, v, o)| Step::Tenants(k, v, o)),
        // A call of this handler ends within ten polls on either framework (counted on
        // both): cuts past that only send the request, so the range stays close above it
        // and most cuts land inside the claim, the handler, the completion or the commit.
        3 => (scope.clone(), key.clone(), variant.clone(), answering, 0..16u8)
            .prop_map(|(s, k, v, o, n)| Step::Cut(s, k, v, o, n)),
        2 => (scope, key).prop_map(|(s, k)| Step::RetentionEnds(s, k)),
        1 => Just(Step::Sweep),
    ]
}

/// An operation's stored answer: what every replay must be, byte for byte.
#[derive(Debug, Clone)]
pub(crate) struct Original {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
    /// The body variant it answered; another one under the key is a 422.
    pub(crate) variant: u8,
}

/// One operation: a key from its first use until its retention ends.
#[derive(Debug, Default)]
pub(crate) struct Op {
    pub(crate) original: Option<Original>,
    /// The retention ended (time was moved past it).
    pub(crate) retention_over: bool,
}

/// What the model knows, and what it saw happen.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) ops: HashMap<(i64, String), Op>,
    /// `(scope, tag, effect)` of every stored answer, of live and ended operations: the
    /// effects the database must hold, no more and no fewer.
    pub(crate) effects: HashSet<(i64, String, String)>,
}

/// What else was in flight when a group of answers was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beside {
    /// Nothing: one request alone.
    Nothing,
    /// Copies of the request under the same key (or the other body, in a race).
    Copies,
    /// A request of the other tenant under the same key name.
    OtherTenant,
}

/// What one answer is, told apart by its headers and body.
enum Kind {
    Replay,
    /// A problem of idem's, by its slug.
    Problem(String),
    /// The handler's own answer, naming the effect it wrote.
    Handler(serde_json::Value),
}

fn kind(reply: &Reply) -> Kind {
    if reply.replayed() {
        return Kind::Replay;
    }
    if reply.header("content-type") == Some("application/problem+json") {
        let body = reply.json();
        let slug = body["type"]
            .as_str()
            .and_then(|t| t.rsplit('#').next())
            .unwrap_or_default()
            .to_owned();
        return Kind::Problem(slug);
    }
    Kind::Handler(reply.json())
}

impl Model {
    /// Before a request: a completed key past its retention starts a new operation; the
    /// old one's effect stays committed.
    pub(crate) fn begin(&mut self, scope: usize, key: u8) {
        let id = (SCOPES[scope], format!("k{key}"));
        let ended = self
            .ops
            .get(&id)
            .is_some_and(|op| op.original.is_some() && op.retention_over);
        if ended {
            self.ops.remove(&id);
        }
        self.ops.entry(id).or_default();
    }

    /// After a request was dropped without its answer: `stored` is what the key's row
    /// holds now, once the request's connections are back (status and body, if it is
    /// completed). A request that got as far as its commit stored an answer, which every
    /// retry must now replay, with its effect; one that did not left nothing.
    pub(crate) fn cut(
        &mut self,
        scope: usize,
        key: u8,
        variant: u8,
        stored: Option<(u16, Bytes)>,
    ) -> Result<(), TestCaseError> {
        let id = (SCOPES[scope], format!("k{key}"));
        let op = self.ops.get_mut(&id).expect("begun");
        let Some((status, body)) = stored else {
            // check_database tells whether a stored answer within its retention is gone.
            return Ok(());
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        if let Some(original) = &op.original {
            check!(
                original.status == status && original.body == body,
                "{id:?}: the stored answer changed to {status} {text} under a request that was \
                 dropped; it was {} {:?}",
                original.status,
                original.body
            );
            return Ok(());
        }
        check!(
            matches!(status, 201 | 402),
            "{id:?}: a dropped request stored {status} {text}"
        );
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| TestCaseError::fail(format!("{id:?}: stored body {text}: {e}")))?;
        check!(
            answer["scope"] == SCOPES[scope]
                && answer["tag"] == id.1.as_str()
                && answer["variant"] == variant,
            "{id:?}: the dropped request stored another request's answer: {text}"
        );
        let effect = answer["effect"].as_str().unwrap_or_default().to_owned();
        self.effects.insert((id.0, id.1.clone(), effect));
        op.original = Some(Original {
            status,
            body,
            variant,
        });
        op.retention_over = false;
        Ok(())
    }

    /// Checks a group of answers to requests sent at once (one, for a plain send), and
    /// records what they stored. The order they were processed in is not known; answers
    /// that ran the handler are taken first, so that the others are checked against the
    /// answer they may have waited for.
    pub(crate) fn answered(
        &mut self,
        scope: usize,
        key: u8,
        sent: &[(u8, Outcome, Reply)],
        beside: Beside,
    ) -> Result<(), TestCaseError> {
        let mut sent: Vec<_> = sent.iter().collect();
        sent.sort_by_key(|(_, _, reply)| match kind(reply) {
            Kind::Handler(_) => 0,
            Kind::Problem(slug) if slug == "handler-panicked" => 0,
            Kind::Problem(_) => 1,
            Kind::Replay => 2,
        });
        for (variant, outcome, reply) in sent {
            self.one(scope, key, *variant, *outcome, reply, beside)?;
        }
        Ok(())
    }

    fn one(
        &mut self,
        scope: usize,
        key: u8,
        variant: u8,
        outcome: Outcome,
        reply: &Reply,
        beside: Beside,
    ) -> Result<(), TestCaseError> {
        let id = (SCOPES[scope], format!("k{key}"));
        let op = self.ops.get_mut(&id).expect("begun");
        let status = reply.status;
        let body = String::from_utf8_lossy(&reply.body).into_owned();
        match kind(reply) {
            Kind::Replay => {
                let Some(original) = &op.original else {
                    return Err(TestCaseError::fail(format!(
                        "{id:?}: a replay ({status} {body}) of an answer never stored"
                    )));
                };
                check!(
                    variant == original.variant,
                    "{id:?}: another body under a live key replayed the first one's answer"
                );
                check!(
                    status == original.status && reply.body == original.body,
                    "{id:?}: the replay {status} {body} differs from the original {} {:?}",
                    original.status,
                    original.body
                );
            }
            Kind::Handler(answer) => {
                check!(
                    op.original.is_none(),
                    "{id:?}: the handler ran again ({status} {body}) for a key whose answer is \
                     stored: {:?}",
                    op.original
                );
                check!(
                    Some(status) == outcome.status(),
                    "{id:?}: the handler's answer {status} {body} for outcome {outcome:?}"
                );
                check!(
                    answer["scope"] == SCOPES[scope]
                        && answer["tag"] == id.1.as_str()
                        && answer["variant"] == variant,
                    "{id:?}: the handler answered another request: {body}"
                );
                if matches!(status, 201 | 402) {
                    let effect = answer["effect"].as_str().unwrap_or_default().to_owned();
                    self.effects.insert((id.0, id.1.clone(), effect));
                    op.original = Some(Original {
                        status,
                        body: reply.body.clone(),
                        variant,
                    });
                    op.retention_over = false;
                }
            }
            Kind::Problem(slug) => match (status, slug.as_str()) {
                (500, "handler-panicked") => {
                    check!(
                        outcome == Outcome::Panics && op.original.is_none(),
                        "{id:?}: a panic answered for outcome {outcome:?}, stored {:?}",
                        op.original
                    );
                }
                (422, "idempotency-key-reused") => {
                    check!(
                        op.original.as_ref().is_some_and(|o| o.variant != variant),
                        "{id:?}: 422 for a body that is not another one's under a stored key \
                         (stored {:?})",
                        op.original
                    );
                }
                // Copies of one request: one runs, the others may find it in progress.
                (409, "request-in-progress") if beside == Beside::Copies => {}
                // SQLite has one write lock for every key and tenant, and a request that
                // waited for it longer than `claim_wait` is told to come back.
                (503, "storage-busy") if beside != Beside::Nothing => {}
                _ => {
                    return Err(TestCaseError::fail(format!(
                        "{id:?}: unexpected answer {status} {body} (outcome {outcome:?}, \
                         stored {:?}, beside: {beside:?})",
                        op.original
                    )));
                }
            },
        }
        Ok(())
    }
}
