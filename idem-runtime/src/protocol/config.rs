//! `Idem`: the pool and settings every `#[idempotent]` handler reads from app data.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http::header::{self, HeaderName};
use sqlx::Pool;

use crate::protocol::in_flight::InFlight;
use crate::store::Backend;
use crate::store::choice::DefaultBackend;

/// idem's configuration, registered once with the web framework (actix-web:
/// `App::app_data(idem)`).
///
/// Cloning is cheap (the pool and settings are shared). The pool decides the backend:
/// a `PgPool` keeps keys in PostgreSQL, a `SqlitePool` in SQLite.
///
/// On PostgreSQL every transaction idem opens (and so every handler's statements) runs
/// at READ COMMITTED, whatever `default_transaction_isolation` the server or the pool's
/// connections set: the claim needs it to tell a duplicate from a conflict.
///
/// ```
/// use std::time::Duration;
///
/// # fn app(pool: sqlx::PgPool) {
/// let idem = idem_runtime::Idem::new(pool)
///     .claim_wait(Duration::from_millis(500))
///     .replay_header(http::header::LINK);
/// assert_eq!(idem.settings().claim_wait(), Duration::from_millis(500));
/// # }
/// ```
pub struct Idem<DB: crate::store::choice::ChosenBackend<'static> = DefaultBackend> {
    pool: Pool<DB>,
    settings: Arc<Settings>,
    /// How the store opens a request's transaction with this `claim_wait`.
    opening: DB::Opening,
    /// Shared by clones, so every handler of the application sees the same keys.
    in_flight: Arc<InFlight>,
}

/// What an [`Idem`] was configured with, read by [`Idem::settings`]: each getter is named
/// after the builder method that sets it.
///
/// Shared by clones of the `Idem`; the builder methods change it copy-on-write.
///
/// ```
/// use std::time::Duration;
///
/// # fn f(pool: sqlx::PgPool) {
/// let idem = idem_runtime::Idem::new(pool)
///     .max_request_bytes(64 * 1024)
///     .replay_header(http::header::LINK)
///     .transient_statuses([http::StatusCode::TOO_MANY_REQUESTS]);
/// let settings = idem.settings();
/// assert_eq!(settings.claim_wait(), Duration::from_secs(1));
/// assert_eq!(settings.max_request_bytes(), 64 * 1024);
/// assert_eq!(settings.max_stored_bytes(), 4 * 1024 * 1024);
/// assert!(settings.replay_headers().contains(&http::header::LINK));
/// assert_eq!(settings.transient_statuses(), [http::StatusCode::TOO_MANY_REQUESTS]);
/// # }
/// ```
#[derive(Clone)]
pub struct Settings {
    claim_wait: Duration,
    max_request_bytes: usize,
    max_stored_bytes: usize,
    replay_headers: Vec<HeaderName>,
    transient_statuses: Vec<StatusCode>,
    keyring: crate::protocol::encryption::KeyringSlot,
}

/// The defaults [`Idem::new`] documents.
impl Default for Settings {
    fn default() -> Self {
        Self {
            claim_wait: Duration::from_secs(1),
            max_request_bytes: 2 * 1024 * 1024,
            max_stored_bytes: 4 * 1024 * 1024,
            replay_headers: vec![
                header::LOCATION,
                header::CONTENT_TYPE,
                header::CONTENT_LOCATION,
                header::ETAG,
                header::LAST_MODIFIED,
                header::RETRY_AFTER,
            ],
            transient_statuses: vec![
                StatusCode::REQUEST_TIMEOUT,
                StatusCode::CONFLICT,
                StatusCode::LOCKED,
                // 425 Too Early (RFC 8470), which `http` has no constant for.
                StatusCode::from_u16(425).expect("425 is a status code"),
                StatusCode::TOO_MANY_REQUESTS,
            ],
            keyring: Default::default(),
        }
    }
}

/// What the protocol reads of a key store's configuration, whichever store it is: the
/// relational [`Idem`] or Redis's `RedisIdem`.
#[doc(hidden)]
pub trait Configured: Clone + Send + Sync + 'static {
    /// How an application makes one, for the message when none is registered.
    const REGISTER: &'static str;

    fn settings(&self) -> &Settings;

    fn keyring(&self) -> &crate::protocol::encryption::KeyringSlot {
        &self.settings().keyring
    }
}

impl<DB: Backend> Configured for Idem<DB> {
    const REGISTER: &'static str = "idem::Idem::new(pool)";

    fn settings(&self) -> &Settings {
        &self.settings
    }
}

impl Settings {
    /// How long a duplicate waits for the request holding its key ([`Idem::claim_wait`]).
    pub fn claim_wait(&self) -> Duration {
        self.claim_wait
    }

    /// The largest request body idem reads ([`Idem::max_request_bytes`]).
    pub fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    /// The largest response body idem stores ([`Idem::max_stored_bytes`]).
    pub fn max_stored_bytes(&self) -> usize {
        self.max_stored_bytes
    }

    /// The response headers stored and replayed ([`Idem::replay_header`] adds one).
    pub fn replay_headers(&self) -> &[HeaderName] {
        &self.replay_headers
    }

    /// The 4xx answers rolled back rather than stored ([`Idem::transient_statuses`]).
    pub fn transient_statuses(&self) -> &[StatusCode] {
        &self.transient_statuses
    }

    /// The keyring that seals stored responses, if any ([`Idem::encrypt_with`]).
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// use idem_runtime::encryption::Keyring;
    ///
    /// let idem = idem_runtime::Idem::new(pool).encrypt_with(Keyring::new("k1", [7; 32]));
    /// assert_eq!(idem.settings().keyring().map(Keyring::current_id), Some("k1"));
    /// # }
    /// ```
    #[cfg(feature = "encryption")]
    pub fn keyring(&self) -> Option<&crate::protocol::encryption::Keyring> {
        self.keyring.as_deref()
    }

    /// Whether a handler's answer with `status` is rolled back rather than stored.
    pub(crate) fn is_transient(&self, status: StatusCode) -> bool {
        status.is_server_error() || self.transient_statuses.contains(&status)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("claim_wait", &self.claim_wait)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("replay_headers", &self.replay_headers)
            .field("transient_statuses", &self.transient_statuses)
            .finish_non_exhaustive()
    }
}

/// A header name as the builders take it, of either `http` version: `http` 1.x's
/// `HeaderName` here, a framework's own (actix-web's, on `http` 0.2) through its adapter.
pub trait IntoHeaderName {
    /// The name in `http` 1.x's type.
    fn into_header_name(self) -> HeaderName;
}

impl IntoHeaderName for HeaderName {
    fn into_header_name(self) -> HeaderName {
        self
    }
}

/// A status code as the builders take it, of either `http` version (see
/// [`IntoHeaderName`]).
pub trait IntoStatusCode {
    /// The status in `http` 1.x's type.
    fn into_status_code(self) -> StatusCode;
}

impl IntoStatusCode for StatusCode {
    fn into_status_code(self) -> StatusCode {
        self
    }
}

/// Headers that carry credentials or per-connection state; never stored or replayed.
const NEVER_REPLAYED: [HeaderName; 7] = [
    header::SET_COOKIE,
    header::AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::WWW_AUTHENTICATE,
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
];

impl<DB: Backend> Idem<DB> {
    /// Uses `pool` for the key table and for the transactions handed to handlers.
    ///
    /// Defaults: a duplicate waits at most 1 s for the request holding its key
    /// ([`claim_wait`](Self::claim_wait)), request bodies up to 2 MiB, stored
    /// responses up to 4 MiB, `Location`, `Content-Type`, `Content-Location`, `ETag`,
    /// `Last-Modified` and `Retry-After` replayed, and 408, 409, 423, 425 and 429
    /// answers of the handler not stored ([`transient_statuses`](Self::transient_statuses)).
    ///
    /// ```
    /// # fn f(pool: sqlx::SqlitePool) {
    /// let idem = idem_runtime::Idem::new(pool); // an Idem<sqlx::Sqlite>
    /// # }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        let settings = Settings::default();
        Self {
            pool,
            opening: DB::opening(settings.claim_wait),
            settings: Arc::new(settings),
            in_flight: Default::default(),
        }
    }

    /// How long a duplicate waits for the request that holds its key before it is
    /// answered 409 with `Retry-After: 1`.
    ///
    /// While it waits it holds a pool connection, so size the pool for the duplicates
    /// you expect at once. When the first request commits within this time, the
    /// duplicate replays its response instead of getting a 409.
    ///
    /// On SQLite, which lets one writer at a time into the database, this is also the
    /// busy timeout of the `BEGIN IMMEDIATE` of a request whose key is new (replays and
    /// keys in progress are answered from a read, without the write lock). A request
    /// that cannot start writing within it is answered 409 `request-in-progress` when a
    /// request of this process holds its key, else 503 `storage-busy` with
    /// `Retry-After: 1`: the database was busy with other requests and nothing was saved.
    ///
    /// # Panics
    /// If `wait` is zero (PostgreSQL reads a zero lock timeout as "wait forever").
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        assert!(
            wait.as_millis() > 0,
            "idem: claim_wait must be at least 1 ms; zero would wait forever"
        );
        Arc::make_mut(&mut self.settings).claim_wait = wait;
        self.opening = DB::opening(wait);
        self
    }

    /// The largest request body idem reads; larger ones get 413 before anything is stored.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.settings).max_request_bytes = bytes;
        self
    }

    /// The largest response body idem stores for replay.
    ///
    /// A handler response over this size is not committed: the transaction is rolled
    /// back and the client gets 500 `response-too-large`, so no business write ever
    /// commits without a replayable answer. Raise the limit for endpoints with big
    /// responses.
    pub fn max_stored_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.settings).max_stored_bytes = bytes;
        self
    }

    /// Adds a response header to the ones stored and replayed.
    ///
    /// # Panics
    /// For headers that carry credentials or connection state (`Set-Cookie`,
    /// `Authorization`, `WWW-Authenticate`, `Proxy-Authenticate`, `Connection`,
    /// `Transfer-Encoding`, `Content-Length`): replaying them to whoever holds the key
    /// would leak them or corrupt the response.
    pub fn replay_header(mut self, name: impl IntoHeaderName) -> Self {
        let name = name.into_header_name();
        assert!(
            !NEVER_REPLAYED.contains(&name),
            "idem: the `{name}` header is never stored or replayed"
        );
        let settings = Arc::make_mut(&mut self.settings);
        if !settings.replay_headers.contains(&name) {
            settings.replay_headers.push(name);
        }
        self
    }

    /// The handler's answers that say "not now" rather than "no": they are not the key's
    /// outcome. Like a 5xx, such an answer rolls back the handler's transaction and leaves
    /// the key unused, so a retry with the same key runs the request again (in the phased
    /// form: the committed phases stay and the lease is released, so the retry resumes).
    /// Replaces the default set: 408, 409, 423, 425 and 429.
    ///
    /// Every other 4xx (a declined card, a 404, a 422) is a completed outcome, stored and
    /// replayed for the key's retention.
    ///
    /// ```
    /// use http::StatusCode;
    ///
    /// # fn app(pool: sqlx::PgPool) {
    /// // This API's 409 means "that name is taken": a final answer, kept for the key.
    /// let idem = idem_runtime::Idem::new(pool).transient_statuses([
    ///     StatusCode::REQUEST_TIMEOUT,
    ///     StatusCode::TOO_MANY_REQUESTS,
    /// ]);
    /// # }
    /// ```
    ///
    /// # Panics
    /// For a status that is not a 4xx: every 5xx rolls back anyway, and a 1xx, 2xx or 3xx
    /// is an outcome.
    pub fn transient_statuses<S: IntoStatusCode>(
        mut self,
        statuses: impl IntoIterator<Item = S>,
    ) -> Self {
        let statuses: Vec<StatusCode> = statuses
            .into_iter()
            .map(IntoStatusCode::into_status_code)
            .collect();
        for status in &statuses {
            assert!(
                status.is_client_error(),
                "idem: transient statuses are 4xx, not {status}"
            );
        }
        Arc::make_mut(&mut self.settings).transient_statuses = statuses;
        self
    }

    pub(crate) fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }

    /// Encrypts stored response bodies and headers with `keyring` (feature `encryption`;
    /// see [`encryption`](crate::protocol::encryption)). The current key seals, every key in the
    /// keyring opens.
    ///
    /// ```
    /// # fn app(pool: sqlx::PgPool) {
    /// use idem_runtime::encryption::Keyring;
    ///
    /// let idem = idem_runtime::Idem::new(pool).encrypt_with(Keyring::new("k1", [0x42; 32]));
    /// # }
    /// ```
    #[cfg(feature = "encryption")]
    pub fn encrypt_with(mut self, keyring: crate::protocol::encryption::Keyring) -> Self {
        Arc::make_mut(&mut self.settings).keyring = Some(Arc::new(keyring));
        self
    }

    /// What this `Idem` was configured with; each getter is named after its builder.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let idem = idem_runtime::Idem::new(pool).max_stored_bytes(1 << 20);
    /// assert_eq!(idem.settings().max_stored_bytes(), 1 << 20);
    /// # }
    /// ```
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn keyring(&self) -> &crate::protocol::encryption::KeyringSlot {
        &self.settings.keyring
    }

    /// The pool idem was built with.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    pub(crate) fn opening(&self) -> &DB::Opening {
        &self.opening
    }
}

impl<DB: Backend> Clone for Idem<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            settings: Arc::clone(&self.settings),
            opening: self.opening.clone(),
            in_flight: Arc::clone(&self.in_flight),
        }
    }
}

impl<DB: Backend> fmt::Debug for Idem<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idem")
            .field("backend", &<DB as sqlx::Database>::NAME)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
