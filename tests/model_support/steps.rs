//! The steps of a sequence, and proptest's generator of them.

use proptest::prelude::*;

use crate::support;

/// The scopes the requests come from: two accounts sharing key names.
pub(crate) const SCOPES: [i64; 2] = [support::ALICE, support::BOB];

/// How a handler attempt behaves; sent in a header, so it is not part of the request's
/// fingerprint and a retry of the same request may behave differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Runs both phases and answers 201.
    Created,
    /// Answers 402 after phase `a`: a final answer, stored and replayed.
    Declined,
    /// Answers 503 after phase `a`: the key stays in progress for a retry.
    Fails,
    /// Panics after phase `a`.
    Panics,
    /// The process dies after the claim, before phase `a`.
    DiesBeforeA,
    /// The process dies after phase `a` committed.
    DiesAfterA,
    /// The process dies after phase `b` committed, before the answer is recorded.
    DiesAfterB,
}

impl Outcome {
    pub(crate) const ALL: [Self; 7] = [
        Self::Created,
        Self::Declined,
        Self::Fails,
        Self::Panics,
        Self::DiesBeforeA,
        Self::DiesAfterA,
        Self::DiesAfterB,
    ];

    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Declined => "declined",
            Self::Fails => "fails",
            Self::Panics => "panics",
            Self::DiesBeforeA => "dies-before-a",
            Self::DiesAfterA => "dies-after-a",
            Self::DiesAfterB => "dies-after-b",
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

    pub(crate) fn dies(self) -> bool {
        matches!(
            self,
            Self::DiesBeforeA | Self::DiesAfterA | Self::DiesAfterB
        )
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// One request: scope index, key index, body variant, outcome.
    Send(usize, u8, u8, Outcome),
    /// Copies of one request sent at once (outcomes that answer).
    Concurrent(usize, u8, u8, Outcome, usize),
    /// One request (of an outcome that answers) dropped after its future was polled this
    /// many times, as a client that disconnects or a process that dies at any point of
    /// the claim, a phase, the outbox write or the completion. What it left is read from
    /// the database once its connections are back in the pool.
    Cut(usize, u8, u8, Outcome, u8),
    /// The key's lease ends now.
    LeaseEnds(usize, u8),
    /// The key's retention ends now.
    RetentionEnds(usize, u8),
    /// One expiry sweep.
    Sweep,
    /// Two relays deliver one batch each, at the same time.
    Relay,
    /// A relay dies while delivering its first message; its hold ends later.
    RelayDies,
    /// Holds on messages end now (a dead relay's, or a failed delivery's delay).
    HoldsEnd,
}

/// Cuts land after 0 to `CUT_POLLS - 1` polls. Counted over 40 sequences per database
/// and framework, an answering call of this handler ends within 12 polls on PostgreSQL
/// and within 25 on SQLite: cuts past that only send the request, so the range stays
/// close to it and most cuts land inside the claim, the phases or the completion.
const CUT_POLLS: u8 = 24;

pub(crate) fn step() -> impl Strategy<Value = Step> {
    let scope = 0..SCOPES.len();
    let key = 0..3u8;
    // Mostly the same body, so that retries and replays happen.
    let variant = prop_oneof![4 => Just(0u8), 1 => Just(1u8)];
    let outcome = proptest::sample::select(Outcome::ALL.to_vec());
    let answering = proptest::sample::select(vec![
        Outcome::Created,
        Outcome::Declined,
        Outcome::Fails,
        Outcome::Panics,
    ]);
    prop_oneof![
        8 => (scope.clone(), key.clone(), variant.clone(), outcome)
            .prop_map(|(s, k, v, o)| Step::Send(s, k, v, o)),
        2 => (scope.clone(), key.clone(), variant.clone(), answering.clone(), 2..4usize)
            .prop_map(|(s, k, v, o, n)| Step::Concurrent(s, k, v, o, n)),
        3 => (scope.clone(), key.clone(), variant, answering, 0..CUT_POLLS)
            .prop_map(|(s, k, v, o, n)| Step::Cut(s, k, v, o, n)),
        3 => (scope.clone(), key.clone()).prop_map(|(s, k)| Step::LeaseEnds(s, k)),
        2 => (scope, key).prop_map(|(s, k)| Step::RetentionEnds(s, k)),
        1 => Just(Step::Sweep),
        1 => Just(Step::Relay),
        1 => Just(Step::RelayDies),
        1 => Just(Step::HoldsEnd),
    ]
}
