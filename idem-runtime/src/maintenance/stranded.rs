//! Keys whose operation never finished: the operator's list and resolution.
//!
//! A phased key in progress past its retention, with no attempt holding its lease, is
//! *stranded*: its process died (after some phases committed, or before the first) and
//! its client has not come back. Such a key is the one record that an operation may have
//! moved money, so idem never deletes it and never starts it over: a late retry resumes
//! it with the same derived keys, and the expiry sweep passes it by. What is left for an
//! operator is to look at what committed and, when no client will come back, to resolve
//! it: complete it with the answer the client should get, or mark it failed.

use std::time::{Duration, SystemTime};

use sqlx::Pool;

use crate::protocol::exchange::encode_headers;
use crate::protocol::problem::{PROBLEM_JSON, ProblemKind};
use crate::store::{Backend, Resolved, StoredResponse, StrandedRow, from_micros};

/// The target of this module's events, as it was before the module moved: filters
/// and subscribers name it (the guide, `docs/guide/operations.md`).
const TRACE_TARGET: &str = "idem_runtime::stranded";

/// A key in progress past its retention, with what its operation committed so far.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// for key in idem_runtime::admin::stranded_keys(&pool, 100).await? {
///     println!("{} {} at {} since {:?}", key.scope, key.key, key.recovery_point, key.created_at);
///     for phase in &key.phases {
///         println!("  {}: {}", phase.name, phase.output);
///     }
///     println!("  provider key of `charge`: {}", key.derived_key("charge"));
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StrandedKey {
    /// The key's scope.
    pub scope: String,
    /// The key, as stored (bare, without Structured Field quotes).
    pub key: String,
    /// Method of the request it was claimed for.
    pub method: String,
    /// Path and query of that request.
    pub path: String,
    /// The last phase that committed, or `started` when none did.
    pub recovery_point: String,
    /// When the key was claimed.
    pub created_at: SystemTime,
    /// When its retention ended.
    pub expires_at: SystemTime,
    /// When the last attempt's lease ended, if it had one.
    pub locked_until: Option<SystemTime>,
    /// The key's generation: with scope and key, what its derived keys hash.
    pub generation: i64,
    /// The phases that committed, in order.
    pub phases: Vec<RecordedPhase>,
}

impl StrandedKey {
    /// The key [`Phases::derived_key`](crate::Phases::derived_key) gave this operation for
    /// `step`: what to look the call up by at the provider.
    ///
    /// ```no_run
    /// # fn show(key: &idem_runtime::admin::StrandedKey) {
    /// assert_eq!(key.derived_key("charge").len(), 36);
    /// # }
    /// ```
    pub fn derived_key(&self, step: &str) -> String {
        crate::protocol::phased::derive_key(&self.scope, &self.key, self.generation, step)
    }
}

/// One committed phase of a stranded key.
///
/// ```no_run
/// # fn show(phase: &idem_runtime::admin::RecordedPhase) {
/// let output: serde_json::Value = serde_json::from_str(&phase.output).unwrap();
/// println!("{} at {:?}: {output}", phase.name, phase.recorded_at);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedPhase {
    /// The phase's name.
    pub name: String,
    /// Its output, as JSON text.
    pub output: String,
    /// When it committed.
    pub recorded_at: SystemTime,
}

/// Lists up to `limit` stranded keys, oldest first, each with its committed phases.
///
/// ```no_run
/// # async fn show(pool: sqlx::SqlitePool) -> Result<(), sqlx::Error> {
/// let stranded = idem_runtime::admin::stranded_keys(&pool, 20).await?;
/// println!("{} keys need an operator", stranded.len());
/// # Ok(())
/// # }
/// ```
pub async fn stranded_keys<DB: Backend>(
    pool: &Pool<DB>,
    limit: u32,
) -> Result<Vec<StrandedKey>, sqlx::Error> {
    let rows = DB::stranded_keys(pool, limit).await?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in rows {
        let phases = DB::recorded_phases(pool, &row.scope, &row.idem_key).await?;
        keys.push(stranded_key(row, phases));
    }
    Ok(keys)
}

fn stranded_key(row: StrandedRow, phases: Vec<(String, String, i64)>) -> StrandedKey {
    StrandedKey {
        scope: row.scope,
        key: row.idem_key,
        method: row.method,
        path: row.path,
        recovery_point: row.recovery_point,
        created_at: from_micros(row.created_at),
        expires_at: from_micros(row.expires_at),
        locked_until: row.locked_until.map(from_micros),
        generation: row.generation,
        phases: phases
            .into_iter()
            .map(|(name, output, at)| RecordedPhase {
                name,
                output,
                recorded_at: from_micros(at),
            })
            .collect(),
    }
}

/// How an operator ends an unfinished operation: the answer every later retry of its key
/// gets, as a replay, without running anything.
///
/// ```
/// use idem_runtime::admin::Resolution;
///
/// // The charge went through and the support team knows its outcome:
/// let done = Resolution::completed(201, "application/json", br#"{"state":"succeeded"}"#.to_vec());
/// // Or it was refunded and must not be resumed:
/// let failed = Resolution::failed("the payment was cancelled and refunded by support");
/// # let _ = (done, failed);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Resolution {
    /// Completes the key with this answer.
    ///
    /// ```
    /// let answer = idem_runtime::admin::Resolution::completed(200, "text/plain", b"done".to_vec());
    /// # let _ = answer;
    /// ```
    ///
    /// # Panics
    /// If `status` is not a status code from 100 to 999, or `content_type` is not a valid
    /// header value.
    pub fn completed(status: u16, content_type: &str, body: Vec<u8>) -> Self {
        assert!(
            (100..1000).contains(&status),
            "idem: {status} is not an HTTP status code"
        );
        assert!(
            http_value(content_type),
            "idem: {content_type:?} is not a valid Content-Type value"
        );
        Self {
            status,
            content_type: content_type.to_owned(),
            body,
        }
    }

    /// Marks the operation failed: every retry gets a 500 problem of type
    /// `operation-failed` whose `detail` is `detail`.
    ///
    /// ```
    /// let failed = idem_runtime::admin::Resolution::failed("refunded by support, ticket 4711");
    /// # let _ = failed;
    /// ```
    pub fn failed(detail: &str) -> Self {
        let kind = ProblemKind::OperationFailed;
        Self {
            status: kind.status().as_u16(),
            content_type: PROBLEM_JSON.to_owned(),
            body: kind.body(detail, serde_json::Map::new()).into_bytes(),
        }
    }
}

fn http_value(value: &str) -> bool {
    http::HeaderValue::from_str(value).is_ok()
}

/// Why [`resolve_key`] did not resolve a key.
///
/// ```
/// # fn f(error: idem_runtime::admin::ResolveError) {
/// match error {
///     idem_runtime::admin::ResolveError::InLease => println!("an attempt is working on it; wait"),
///     other => println!("{other}"),
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ResolveError {
    /// There is no such key (check scope and key, and that the key is the bare form).
    NotFound,
    /// The key has its final answer already: there is nothing to resolve.
    AlreadyCompleted,
    /// An attempt holds the key's lease: it is being worked on right now.
    InLease,
    /// The table holds sealed responses (an application with a keyring writes to it),
    /// and this call has no keyring: an answer stored in clear would be refused with 500
    /// `stored-response-unreadable` instead of replayed. Resolve with
    /// [`resolve_key_with`] and the application's `Idem`, keyring included.
    Sealed,
    /// The database failed.
    Database(sqlx::Error),
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound => f.write_str("no such key"),
            Self::AlreadyCompleted => f.write_str("the key is completed already"),
            Self::InLease => f.write_str(
                "an attempt holds the key's lease; wait for it to finish or for the lease to run out",
            ),
            Self::Sealed => f.write_str(
                "the table holds sealed responses (encrypted storage) and this resolution has \
                 no keyring: its answer would be stored in clear, and the application would \
                 answer 500 instead of replaying it; resolve with the application's keyring \
                 (idem_runtime::admin::resolve_key_with)",
            ),
            Self::Database(error) => write!(f, "database error: {error}"),
        }
    }
}

impl std::error::Error for ResolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Database(error) => Some(error),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for ResolveError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

/// Ends the operation of a key in progress whose lease is free (stranded, or simply
/// unfinished) with `resolution`, and keeps the key for `keep` from now, so that its
/// client's retries get that answer as a replay instead of a new operation.
///
/// The key gets a new fencing token, so an attempt that is still running past its lease
/// can record nothing more. Committed phases stay recorded, for the audit. The answer is
/// stored as it is, so with encrypted storage (feature `encryption`) use
/// [`resolve_key_with`], which seals it with the application's keyring: an answer in
/// clear would be refused there (500 `stored-response-unreadable`) instead of replayed.
/// Without a keyring, a table that holds sealed responses gets [`ResolveError::Sealed`]
/// and nothing is stored.
///
/// ```no_run
/// # async fn resolve(pool: sqlx::PgPool) -> Result<(), idem_runtime::admin::ResolveError> {
/// use std::time::Duration;
/// use idem_runtime::admin::Resolution;
///
/// idem_runtime::admin::resolve_key(
///     &pool,
///     "1001",
///     "8e03978e-40d5",
///     &Resolution::failed("refunded by support"),
///     Duration::from_secs(7 * 24 * 3600),
/// )
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn resolve_key<DB: Backend>(
    pool: &Pool<DB>,
    scope: &str,
    key: &str,
    resolution: &Resolution,
    keep: Duration,
) -> Result<(), ResolveError> {
    resolve(pool, &Default::default(), scope, key, resolution, keep).await
}

/// [`resolve_key`] for the database of `idem`, with its settings: with encrypted storage
/// (feature `encryption`, `Idem::encrypt_with`) the answer
/// is sealed with `idem`'s keyring, so that its retries replay it like any other stored
/// response. Build `idem` as the application does, with the same keyring.
///
/// ```no_run
/// # async fn resolve(pool: sqlx::PgPool) -> Result<(), idem_runtime::admin::ResolveError> {
/// use std::time::Duration;
/// use idem_runtime::admin::Resolution;
///
/// // The same configuration the application runs with, keyring included.
/// let idem = idem_runtime::Idem::new(pool);
/// idem_runtime::admin::resolve_key_with(
///     &idem,
///     "1001",
///     "8e03978e-40d5",
///     &Resolution::failed("refunded by support"),
///     Duration::from_secs(7 * 24 * 3600),
/// )
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn resolve_key_with<DB: Backend>(
    idem: &crate::protocol::config::Idem<DB>,
    scope: &str,
    key: &str,
    resolution: &Resolution,
    keep: Duration,
) -> Result<(), ResolveError> {
    resolve(idem.pool(), idem.keyring(), scope, key, resolution, keep).await
}

async fn resolve<DB: Backend>(
    pool: &Pool<DB>,
    keyring: &crate::protocol::encryption::KeyringSlot,
    scope: &str,
    key: &str,
    resolution: &Resolution,
    keep: Duration,
) -> Result<(), ResolveError> {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        resolution
            .content_type
            .parse()
            .expect("checked when the resolution was made"),
    );
    let headers = encode_headers(&headers, &[http::header::CONTENT_TYPE]);
    // The answer is sealed to the row's generation; the update below applies only to that
    // generation, which a key in progress keeps until it completes.
    let Some(generation) = DB::generation_of(pool, scope, key).await? else {
        return Err(ResolveError::NotFound);
    };
    // After the key is found, so a mistyped key costs no scan of the table.
    if !crate::protocol::encryption::seals(keyring)
        && DB::holds_sealed_responses(pool, crate::protocol::SEALED_MARKER).await?
    {
        return Err(ResolveError::Sealed);
    }
    let row = crate::protocol::encryption::Row {
        scope,
        key,
        generation,
        status: resolution.status,
    };
    let (headers, body) =
        crate::protocol::encryption::seal(keyring, &row, headers, &resolution.body);
    let response = StoredResponse {
        status: resolution.status,
        headers: &headers,
        body: &body,
    };
    match DB::resolve_key(pool, scope, key, generation, &response, keep).await? {
        Resolved::Done => {
            tracing::info!(
                target: TRACE_TARGET,
                scope,
                key,
                status = resolution.status,
                "resolved by an operator"
            );
            Ok(())
        }
        Resolved::NotFound => Err(ResolveError::NotFound),
        Resolved::AlreadyCompleted => Err(ResolveError::AlreadyCompleted),
        Resolved::InLease => Err(ResolveError::InLease),
    }
}
