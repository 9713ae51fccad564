//! The phased form's key store on Redis 7 or Valkey 8, for effects that live outside the
//! relational database (the seed's one exception to "keys in the same transaction as the
//! business write").
//!
//! Not an implementation of [`Backend`](crate::Backend): that trait is a database's
//! transactions and statements through sqlx, and Redis has neither. A Redis key commits
//! with nothing else the handler writes, so it serves only the phased form, whose every
//! step is an outside call under a derived key; [`RedisStore`] is that form's store,
//! written as scripts (`scripts/*.lua`, sent by `EVALSHA`, by `EVAL` when the server does
//! not know them yet).
//!
//! Layout of one idem key (`scope` and `key` escaped, so the tag is unambiguous), all
//! under one hash tag and so in one cluster slot:
//!
//! | key | holds | time to live |
//! | --- | --- | --- |
//! | `idem:{scope:key}` | hash: mark, fingerprint, method, path, state, token, generation, creation time (server clock), recovery point, answer | the retention |
//! | `idem:{scope:key}:lease` | the token of the attempt holding the lease | the lease |
//! | `idem:{scope:key}:token` | the key's fencing counter (`INCR`) | retention and lease, renewed |
//! | `idem:{scope:key}:phases` | list of the phases recorded, in order | as the record |
//! | `idem:{scope:key}:phase:<name>` | a phase's output | as the record |
//!
//! Expiry is Redis's: nothing sweeps.

use std::fmt;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{RedisError, Script, Value};
use bytes::Bytes;

mod admin;
mod either;
mod keys;
mod reply;
mod wait;

pub use admin::{RedisKeyStats, inspect_key, key_stats};
pub(crate) use either::EitherConnection;

use keys::KeyNames;
use reply::Reply;

/// The scripts, each with the shared prelude (`scripts/prelude.lua`).
struct Scripts {
    claim: Script,
    take_over: Script,
    record_phase: Script,
    extend_lease: Script,
    complete: Script,
    release: Script,
}

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("scripts/prelude.lua"),
            include_str!(concat!("scripts/", $file))
        ))
    };
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        claim: script!("claim.lua"),
        take_over: script!("take_over.lua"),
        record_phase: script!("record_phase.lua"),
        extend_lease: script!("extend_lease.lua"),
        complete: script!("complete.lua"),
        release: script!("release.lua"),
    })
}

/// idem's phased keys in Redis or Valkey: claim with a lease and a fencing token,
/// takeover after the lease, fenced phase records, completion and release.
///
/// `C` is the connection: a [`ConnectionManager`] for one node (reconnecting, see
/// [`connect`](RedisStore::connect)), a cluster connection
/// ([`connect_cluster`](RedisStore::connect_cluster)), or any other `redis` connection
/// given to [`new`](RedisStore::new). Cloning the store clones the connection handle,
/// which shares the connection.
///
/// ```no_run
/// # async fn run() -> Result<(), idem_runtime::redis::RedisStoreError> {
/// use std::time::Duration;
/// use idem_runtime::redis::{RedisClaim, RedisRequest, RedisStore};
///
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let request = RedisRequest {
///     scope: "account-7",
///     key: "0f8fad5b-d9cb-469f-a165-70867728950e",
///     fingerprint: [0; 32],
///     method: "POST",
///     path: "/notifications",
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(24 * 3600),
/// };
/// if let RedisClaim::Claimed(attempt) = store.claim(&request).await? {
///     store.record_phase(&attempt, "send", r#"{"id":"msg_1"}"#).await?;
///     store.complete(&attempt, 202, b"", b"{}").await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    conn: C,
}

impl<C> fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

impl RedisStore<ConnectionManager> {
    /// Connects to one Redis or Valkey node at `url` (`redis://host:port/db`), and fails
    /// if it cannot be reached. Later, a lost connection is made again by the next
    /// command; a command that cannot reach the server fails within about two seconds
    /// rather than waiting ([`RedisStoreError::is_unavailable`]).
    pub async fn connect(url: &str) -> Result<Self, RedisStoreError> {
        Self::connect_to(url).await
    }

    async fn connect_to(info: impl ::redis::IntoConnectionInfo) -> Result<Self, RedisStoreError> {
        let client = ::redis::Client::open(info)?;
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { conn })
    }
}

impl RedisStore<::redis::cluster_async::ClusterConnection> {
    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port`). The
    /// connection follows `MOVED` and `ASK` redirections itself; every script touches
    /// one hash tag, so one slot.
    pub async fn connect_cluster(nodes: &[&str]) -> Result<Self, RedisStoreError> {
        let client = ::redis::cluster::ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(2))
            .build()?;
        let conn = client.get_async_connection().await?;
        Ok(Self { conn })
    }
}

/// What a claim writes about a request.
#[derive(Debug, Clone)]
pub struct RedisRequest<'a> {
    /// Who the key belongs to (the caller's account or API key).
    pub scope: &'a str,
    /// The client's `Idempotency-Key`.
    pub key: &'a str,
    /// The request's fingerprint: a retry must send the same one.
    pub fingerprint: [u8; 32],
    /// The request's method, kept for the mismatch answer.
    pub method: &'a str,
    /// The request's path, kept for the mismatch answer.
    pub path: &'a str,
    /// How long an attempt holds the key before a retry may take it over.
    pub lease: Duration,
    /// How long the key and its answer are kept.
    pub retention: Duration,
}

/// What [`RedisStore::claim`] found.
#[derive(Debug)]
pub enum RedisClaim {
    /// The key was free and is now this request's: run the first phase.
    Claimed(Attempt),
    /// The key's operation completed: replay its answer.
    Completed(StoredAnswer),
    /// Another attempt holds the key's lease: answer 409 with `Retry-After`.
    InFlight {
        /// How long the lease has left, at least a millisecond.
        retry_after: Duration,
    },
    /// The key's last attempt stopped before completing and its lease ended: a retry of
    /// the same request may [`take_over`](RedisStore::take_over) with this token.
    LeaseEnded {
        /// The token of the attempt that stopped.
        fencing_token: i64,
    },
    /// The key was used for a different request: answer 422.
    Mismatch {
        /// The method of the request the key was first used for.
        method: String,
        /// Its path.
        path: String,
    },
}

/// The answer a completed key replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    /// Which life of the key answered (its first attempt's token).
    pub generation: i64,
    /// The status code.
    pub status: u16,
    /// The allow-listed headers, in the block the completion stored.
    pub headers: Bytes,
    /// The body.
    pub body: Bytes,
}

/// An attempt holding a key: every write it makes names its fencing token, and the store
/// refuses the write once a takeover replaced the token.
#[derive(Debug, Clone)]
pub struct Attempt {
    names: KeyNames,
    /// This attempt's token.
    pub fencing_token: i64,
    /// Fixed for the life of the key (its first attempt's token): derived keys hash it.
    pub generation: i64,
    /// The last phase recorded before this attempt, if any.
    pub recovery_point: Option<String>,
    /// `(phase, output)` of every phase recorded before this attempt, in order.
    pub recorded: Vec<(String, String)>,
    lease: Duration,
    retention: Duration,
}

/// What [`RedisStore::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// No phase was recorded: the key is deleted, and a retry runs as a first request.
    Deleted,
    /// Phases were recorded (effects were made outside): only the lease ended, so a
    /// retry takes over at once and resumes after them.
    LeaseEnded,
    /// The attempt no longer held the key (taken over, or expired): nothing changed.
    Fenced,
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    /// A store on a connection made by the caller (for instance with its own timeouts).
    pub fn new(conn: C) -> Self {
        Self { conn }
    }

    /// Claims the request's key: as `SET NX PX lease`, with the request's fingerprint
    /// and a fencing token from `INCR` on the key's own counter; or reports what holds it.
    pub async fn claim(&self, req: &RedisRequest<'_>) -> Result<RedisClaim, RedisStoreError> {
        let names = KeyNames::new(req.scope, req.key);
        let reply = self
            .run(
                &names,
                scripts()
                    .claim
                    .key(&names.record)
                    .key(&names.counter)
                    .key(&names.lease)
                    .key(&names.phases)
                    .arg(&req.fingerprint[..])
                    .arg(req.method)
                    .arg(req.path)
                    .arg(millis(req.lease))
                    .arg(millis(req.retention)),
            )
            .await?;
        match reply.tag.as_str() {
            "claimed" => {
                let token = reply.int(0)?;
                Ok(RedisClaim::Claimed(Attempt {
                    names,
                    fencing_token: token,
                    generation: token,
                    recovery_point: None,
                    recorded: Vec::new(),
                    lease: req.lease,
                    retention: req.retention,
                }))
            }
            "completed" => Ok(RedisClaim::Completed(StoredAnswer {
                generation: reply.int(0)?,
                status: reply.status(1)?,
                headers: reply.bytes(2)?,
                body: reply.bytes(3)?,
            })),
            "in_flight" => {
                let ms = u64::try_from(reply.int(1)?).unwrap_or(0).max(1);
                Ok(RedisClaim::InFlight {
                    retry_after: Duration::from_millis(ms),
                })
            }
            "lease_ended" => Ok(RedisClaim::LeaseEnded {
                fencing_token: reply.int(0)?,
            }),
            "mismatch" => Ok(RedisClaim::Mismatch {
                method: reply.text(0)?,
                path: reply.text(1)?,
            }),
            _ => Err(reply.unexpected()),
        }
    }

    /// Takes over the attempt holding token `seen`, if its lease has ended and no one
    /// took it over first: the new attempt gets a new token, the phases recorded so far
    /// and a retention from now. `None` when another retry won, the lease is live again,
    /// the key completed, or it is gone.
    pub async fn take_over(
        &self,
        req: &RedisRequest<'_>,
        seen: i64,
    ) -> Result<Option<Attempt>, RedisStoreError> {
        let names = KeyNames::new(req.scope, req.key);
        let reply = self
            .run(
                &names,
                scripts()
                    .take_over
                    .key(&names.record)
                    .key(&names.counter)
                    .key(&names.lease)
                    .key(&names.phases)
                    .arg(seen)
                    .arg(millis(req.lease))
                    .arg(millis(req.retention)),
            )
            .await?;
        match reply.tag.as_str() {
            "taken" => {
                let point = reply.text(2)?;
                let recorded = (3..reply.len())
                    .step_by(2)
                    .map(|i| Ok((reply.text(i)?, reply.text(i + 1)?)))
                    .collect::<Result<_, RedisStoreError>>()?;
                Ok(Some(Attempt {
                    names,
                    fencing_token: reply.int(0)?,
                    generation: reply.int(1)?,
                    recovery_point: (!point.is_empty()).then_some(point),
                    recorded,
                    lease: req.lease,
                    retention: req.retention,
                }))
            }
            "lost" | "gone" => Ok(None),
            _ => Err(reply.unexpected()),
        }
    }

    /// Records a phase's output and moves the recovery point, if `attempt` still holds
    /// the key; renews its lease. False when it was taken over (or the key expired):
    /// the phase's caller must stop.
    pub async fn record_phase(
        &self,
        attempt: &Attempt,
        phase: &str,
        output: &str,
    ) -> Result<bool, RedisStoreError> {
        let names = &attempt.names;
        let reply = self
            .run(
                names,
                scripts()
                    .record_phase
                    .key(&names.record)
                    .key(&names.lease)
                    .key(&names.phases)
                    .key(names.phase(phase))
                    .arg(attempt.fencing_token)
                    .arg(phase)
                    .arg(output)
                    .arg(millis(attempt.lease)),
            )
            .await?;
        reply.done()
    }

    /// Pushes `attempt`'s lease forward by a lease from now; false when it no longer
    /// holds the key.
    pub async fn extend_lease(&self, attempt: &Attempt) -> Result<bool, RedisStoreError> {
        let names = &attempt.names;
        let reply = self
            .run(
                names,
                scripts()
                    .extend_lease
                    .key(&names.record)
                    .key(&names.lease)
                    .arg(attempt.fencing_token)
                    .arg(millis(attempt.lease)),
            )
            .await?;
        reply.done()
    }

    /// Completes the key with its answer (status, the allow-listed header block, body),
    /// kept for the retention from now, if `attempt` still holds the key; false when it
    /// was taken over or expired, and nothing was written.
    pub async fn complete(
        &self,
        attempt: &Attempt,
        status: u16,
        headers: &[u8],
        body: &[u8],
    ) -> Result<bool, RedisStoreError> {
        let names = &attempt.names;
        let reply = self
            .run(
                names,
                scripts()
                    .complete
                    .key(&names.record)
                    .key(&names.lease)
                    .key(&names.phases)
                    .key(&names.counter)
                    .arg(attempt.fencing_token)
                    .arg(status)
                    .arg(headers)
                    .arg(body)
                    .arg(millis(attempt.retention)),
            )
            .await?;
        reply.done()
    }

    /// Gives the key up after a 5xx or a transient failure, if `attempt` still holds it:
    /// see [`Released`] for what that leaves.
    pub async fn release(&self, attempt: &Attempt) -> Result<Released, RedisStoreError> {
        let names = &attempt.names;
        let reply = self
            .run(
                names,
                scripts()
                    .release
                    .key(&names.record)
                    .key(&names.lease)
                    .key(&names.phases)
                    .arg(attempt.fencing_token),
            )
            .await?;
        match reply.tag.as_str() {
            "deleted" => Ok(Released::Deleted),
            "lease_ended" => Ok(Released::LeaseEnded),
            "fenced" | "gone" => Ok(Released::Fenced),
            _ => Err(reply.unexpected()),
        }
    }

    /// Waits until `replicas` replicas acknowledged every write this store's connection
    /// sent before (Redis's `WAIT`), or `timeout` passed; returns how many did. Redis
    /// acknowledges a write before it reaches a replica (or the disk: `appendfsync
    /// always` on the server for that), so a completion that must survive a failover
    /// waits here before its answer is sent. On a cluster connection the client sends
    /// `WAIT` to every master and answers the least count: use
    /// [`wait_for_replicas_of`](RedisStore::wait_for_replicas_of) there, which asks the
    /// master of one key.
    pub async fn wait_for_replicas(
        &self,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32, RedisStoreError> {
        let mut conn = self.conn.clone();
        let acked: i64 = ::redis::cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout))
            .query_async(&mut conn)
            .await?;
        Ok(u32::try_from(acked).unwrap_or(0))
    }

    /// Runs a script and reads its tagged reply; a value idem did not write under the
    /// key's record is an error, never an answer.
    async fn run(
        &self,
        names: &KeyNames,
        invocation: &mut ::redis::ScriptInvocation<'_>,
    ) -> Result<Reply, RedisStoreError> {
        let mut conn = self.conn.clone();
        let value: Value = invocation.invoke_async(&mut conn).await?;
        let reply = Reply::parse(value)?;
        if reply.tag == "foreign" {
            return Err(RedisStoreError::Foreign {
                key: names.record.clone(),
                found: reply.text(0)?,
            });
        }
        Ok(reply)
    }
}

/// A duration as whole milliseconds, at least one (`PX 0` is an error in Redis).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Why a Redis store's call failed. None of them is an answer to replay.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// Redis answered with an error or could not be reached: see
    /// [`is_unavailable`](Self::is_unavailable).
    Redis(RedisError),
    /// The key's record holds a value idem did not write (another program uses the same
    /// name): a clear 500, never a replay.
    Foreign {
        /// The Redis key.
        key: String,
        /// What is there (a Redis type, or a hash without idem's mark).
        found: String,
    },
    /// A script answered in a shape the store does not know: a different version of
    /// idem's scripts is loaded under the same name, or the reply was altered.
    Reply(String),
}

impl RedisStoreError {
    /// Whether Redis could not be reached or did not answer in time (the web layer
    /// answers 503 with `Retry-After`): as opposed to an answer that was wrong.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        ::redis::ErrorKind::Server(
                            ::redis::ServerErrorKind::BusyLoading
                                | ::redis::ServerErrorKind::TryAgain
                                | ::redis::ServerErrorKind::ClusterDown
                                | ::redis::ServerErrorKind::MasterDown
                        )
                    )
            }
            Self::Foreign { .. } | Self::Reply(_) => false,
        }
    }
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis(e) => write!(f, "redis: {e}"),
            Self::Foreign { key, found } => write!(
                f,
                "the Redis key `{key}` holds a {found}, not a key idem wrote: another \
                 program writes under idem's names; give idem a database of its own \
                 (`redis://host/N`) or remove that value"
            ),
            Self::Reply(what) => write!(f, "unexpected reply from idem's Redis script: {what}"),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis(e) => Some(e),
            Self::Foreign { .. } | Self::Reply(_) => None,
        }
    }
}

impl From<RedisError> for RedisStoreError {
    fn from(e: RedisError) -> Self {
        Self::Redis(e)
    }
}
