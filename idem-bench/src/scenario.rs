//! The scenarios of the main table: their names, descriptions and which completes the
//! keys another replays.

/// The scenarios of the main table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// The example's insert, no idempotency.
    Bare,
    /// The seed's protocol written by hand.
    Hand,
    /// `#[idempotent]`, every key new.
    Idem,
    /// `#[idempotent]`, keys that already completed.
    Replay,
    /// The hand-written baseline, keys that already completed.
    HandReplay,
    /// `#[idempotent]`, 20 concurrent duplicates of every key.
    Storm,
    /// The phased form with a provider that does nothing.
    Phased,
    /// The insert as plain SQL from this process, no HTTP.
    FloorBare,
    /// The hand-written baseline's statements as plain SQL, no HTTP.
    FloorHand,
    /// idem's statements for a completed key as plain SQL, no HTTP.
    FloorReplay,
    /// idem's statements as plain SQL from this process, no HTTP.
    FloorProtocol,
    /// `bare` as an axum handler.
    AxumBare,
    /// `hand` as an axum handler.
    AxumHand,
    /// `#[idem::axum::idempotent]`, every key new.
    AxumIdem,
    /// `#[idem::axum::idempotent]`, keys that already completed.
    AxumReplay,
    /// An effect outside the database (a message sent), no idempotency, no Redis.
    RedisBare,
    /// The same with the seed's Redis protocol by hand: `SET NX PX`, then the answer.
    RedisHand,
    /// The hand-written Redis baseline, keys that already completed.
    RedisHandReplay,
    /// idem's Redis store under `#[idempotent(store = redis)]`, every key new.
    RedisIdem,
    /// idem's Redis store under `#[idempotent(store = redis)]`, keys that already
    /// completed.
    RedisReplay,
}

impl Scenario {
    /// In the order of the table.
    pub(crate) const TABLE: [Scenario; 20] = [
        Scenario::Bare,
        Scenario::Hand,
        Scenario::Idem,
        Scenario::Replay,
        Scenario::HandReplay,
        Scenario::Storm,
        Scenario::Phased,
        Scenario::FloorBare,
        Scenario::FloorHand,
        Scenario::FloorProtocol,
        Scenario::FloorReplay,
        Scenario::AxumBare,
        Scenario::AxumHand,
        Scenario::AxumIdem,
        Scenario::AxumReplay,
        Scenario::RedisBare,
        Scenario::RedisHand,
        Scenario::RedisHandReplay,
        Scenario::RedisIdem,
        Scenario::RedisReplay,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Bare => "bare",
            Scenario::Hand => "hand",
            Scenario::Idem => "idem",
            Scenario::Replay => "replay",
            Scenario::HandReplay => "hand-replay",
            Scenario::Storm => "storm",
            Scenario::Phased => "phased",
            Scenario::FloorBare => "floor-bare",
            Scenario::FloorHand => "floor-hand",
            Scenario::FloorReplay => "floor-replay",
            Scenario::FloorProtocol => "floor-protocol",
            Scenario::AxumBare => "axum-bare",
            Scenario::AxumHand => "axum-hand",
            Scenario::AxumIdem => "axum-idem",
            Scenario::AxumReplay => "axum-replay",
            Scenario::RedisBare => "redis-bare",
            Scenario::RedisHand => "redis-hand",
            Scenario::RedisHandReplay => "redis-hand-replay",
            Scenario::RedisIdem => "redis-idem",
            Scenario::RedisReplay => "redis-replay",
        }
    }

    /// Sends keys that another scenario completed.
    pub(crate) fn replays(self) -> Option<Scenario> {
        match self {
            Scenario::Replay => Some(Scenario::Idem),
            Scenario::HandReplay => Some(Scenario::Hand),
            Scenario::FloorReplay => Some(Scenario::FloorProtocol),
            Scenario::AxumReplay => Some(Scenario::AxumIdem),
            Scenario::RedisHandReplay => Some(Scenario::RedisHand),
            Scenario::RedisReplay => Some(Scenario::RedisIdem),
            _ => None,
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::TABLE.into_iter().find(|s| s.name() == name)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Scenario::Bare => "the example's insert, autocommit, no idempotency",
            Scenario::Hand => "the seed's single-transaction protocol written by hand",
            Scenario::Idem => "#[idempotent], first execution, unique keys",
            Scenario::Replay => "#[idempotent], keys that already completed",
            Scenario::HandReplay => "the hand-written baseline, keys that already completed",
            Scenario::Storm => "#[idempotent], 20 concurrent duplicates per key",
            Scenario::Phased => {
                "the phased form (lease, two phases: the insert, a provider that does nothing)"
            }
            Scenario::FloorBare => "the insert as plain SQL, no HTTP",
            Scenario::FloorHand => "the hand-written baseline's statements as plain SQL, no HTTP",
            Scenario::FloorProtocol => "idem's statements as plain SQL, no HTTP",
            Scenario::FloorReplay => "idem's statements for a completed key as plain SQL, no HTTP",
            Scenario::AxumBare => "`bare` as an axum handler, same process, pool and SQL",
            Scenario::AxumHand => "`hand` as an axum handler (hand.rs's protocol and SQL)",
            Scenario::AxumIdem => "#[idem::axum::idempotent], first execution, unique keys",
            Scenario::AxumReplay => "#[idem::axum::idempotent], keys that already completed",
            Scenario::RedisBare => {
                "a message sent through a provider that answers at once, no idempotency, no Redis (the Redis rows' CPU column counts redis-server where the others count PostgreSQL)"
            }
            Scenario::RedisHand => {
                "the same with the seed's Redis protocol by hand: SET NX PX, the send, SET the answer"
            }
            Scenario::RedisHandReplay => {
                "the Redis hand-written baseline, keys that already completed"
            }
            Scenario::RedisIdem => {
                "#[idempotent(store = redis)], first execution: one step calling the same provider with a derived key"
            }
            Scenario::RedisReplay => "#[idempotent(store = redis)], keys that already completed",
        }
    }

    /// Served by the Redis rows' routes (the server needs a Redis).
    pub(crate) fn on_redis(self) -> bool {
        matches!(
            self,
            Scenario::RedisBare
                | Scenario::RedisHand
                | Scenario::RedisHandReplay
                | Scenario::RedisIdem
                | Scenario::RedisReplay
        )
    }

    /// Served by the axum server rather than the actix-web one.
    pub(crate) fn on_axum(self) -> bool {
        matches!(
            self,
            Scenario::AxumBare | Scenario::AxumHand | Scenario::AxumIdem | Scenario::AxumReplay
        )
    }
}
