//! The phased form with its keys in Redis: [`RedisIdem`], the configuration a
//! `#[idempotent(store = redis, ..)]` handler reads, and [`Steps`], its handler parameter.
//!
//! Nothing a step writes to a database commits with the key, so a step gets no
//! transaction: each is an external call, deduplicated at its provider by a
//! [`derived_key`](Steps::derived_key), whose output is recorded in Redis so that a
//! takeover resumes after it instead of calling again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::config::{Configured, Settings};
use crate::protocol::encryption;
use crate::protocol::phased::{
    Attempt, PhaseError, PhaseErrorKind, PhaseOutput, check_phase_name, derive_key, recorded_output,
};
use crate::store::redis::{self as store, EitherConnection, RedisStore};

mod driver;

/// idem's configuration for endpoints whose keys live in Redis, registered with the web
/// framework as [`Idem`](crate::Idem) is (actix-web: `App::app_data(redis_idem)`; axum:
/// `Router::layer(Extension(redis_idem))`).
///
/// Cloning is cheap: the connection and the settings are shared.
///
/// ```no_run
/// use idem_runtime::redis::{RedisIdem, RedisStore};
///
/// # async fn app() -> Result<(), idem_runtime::redis::RedisStoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/0").await?;
/// let redis_idem = RedisIdem::new(store);
/// assert_eq!(redis_idem.settings().max_request_bytes(), 2 * 1024 * 1024);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisIdem {
    store: RedisStore<EitherConnection>,
    settings: Arc<Settings>,
}

impl RedisIdem {
    /// Keeps keys in `store`, one node, with the defaults [`Idem::new`](crate::Idem::new)
    /// documents.
    pub fn new(store: RedisStore) -> Self {
        Self::with_store(store.into())
    }

    /// Keeps keys in a Redis Cluster (`store` from [`RedisStore::connect_cluster`]); each
    /// key's data sits under one hash tag, so in one slot.
    ///
    /// ```no_run
    /// use idem_runtime::redis::{RedisIdem, RedisStore};
    ///
    /// # async fn app() -> Result<(), idem_runtime::redis::RedisStoreError> {
    /// let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let redis_idem = RedisIdem::new_cluster(RedisStore::connect_cluster(&nodes).await?);
    /// # let _ = redis_idem;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_cluster(store: RedisStore<::redis::cluster_async::ClusterConnection>) -> Self {
        Self::with_store(store.into())
    }

    fn with_store(store: RedisStore<EitherConnection>) -> Self {
        Self {
            store,
            settings: Arc::new(Settings::default()),
        }
    }

    /// Uses `settings` (request and stored limits, replayed headers, transient statuses,
    /// the keyring): an application with an [`Idem`](crate::Idem) too passes
    /// `idem.settings().clone()`, so both stores answer alike.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), idem_runtime::redis::RedisStoreError> {
    /// use idem_runtime::redis::{RedisIdem, RedisStore};
    ///
    /// let idem = idem_runtime::Idem::new(pool).replay_header(http::header::LINK);
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/0").await?;
    /// let redis_idem = RedisIdem::new(store).with_settings(idem.settings().clone());
    /// assert!(redis_idem.settings().replay_headers().contains(&http::header::LINK));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = Arc::new(settings);
        self
    }

    /// What this configuration answers with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The store the keys are kept in.
    pub(crate) fn store(&self) -> &RedisStore<EitherConnection> {
        &self.store
    }
}

impl Configured for RedisIdem {
    const REGISTER: &'static str = "idem::redis::RedisIdem::new(store)";

    fn settings(&self) -> &Settings {
        &self.settings
    }
}

impl fmt::Debug for RedisIdem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisIdem")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The handler parameter of an endpoint whose keys live in Redis
/// (`#[idempotent(store = redis, lease = ..)]`): runs named steps, each an external call,
/// and remembers their outputs in Redis across crashes and takeovers.
///
/// A step gets no transaction: keys in Redis cannot commit with database writes, so an
/// endpoint that writes to a database keeps its keys there and takes `idem::Phases`.
/// Each [`run`](Self::run) records the step's output, fenced by the attempt's token, once
/// the step returned `Ok`. A retry that takes over an attempt that stopped gets the
/// recorded outputs without calling again; a step whose output was not recorded (the
/// process died after the call) runs again, with the same
/// [`derived_key`](Self::derived_key), so the provider answers the first call's result.
///
/// ```
/// use idem_runtime::phased::PhaseError;
/// use idem_runtime::redis::Steps;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Sent {
///     message_id: String,
/// }
///
/// async fn notify(steps: &mut Steps, to: &str) -> Result<Sent, PhaseError> {
///     let provider_key = steps.derived_key("send");
///     steps
///         .run("sent", async || {
///             // Call the provider with `provider_key` as its idempotency key.
///             Ok::<_, PhaseError>(Sent { message_id: format!("{to}:{provider_key}") })
///         })
///         .await
/// }
/// ```
pub struct Steps {
    /// The store and the keyring the outputs are sealed with.
    idem: RedisIdem,
    attempt: Arc<Attempt>,
    /// The store's own view of the attempt, which its fenced writes name.
    held: store::Attempt,
    /// Outputs of the steps recorded before this attempt, by name.
    recorded: HashMap<String, String>,
    /// Names run in this attempt, to refuse a name used twice.
    ran: HashSet<String>,
}

impl Steps {
    fn new(
        idem: &RedisIdem,
        attempt: Arc<Attempt>,
        held: store::Attempt,
        recorded: Vec<(String, String)>,
    ) -> Self {
        Self {
            idem: idem.clone(),
            attempt,
            held,
            recorded: recorded.into_iter().collect(),
            ran: HashSet::new(),
        }
    }

    /// Runs the step `name`, or returns its recorded output if an earlier attempt at this
    /// key recorded it.
    ///
    /// `step` is called with nothing: it makes its call (with a
    /// [`derived_key`](Self::derived_key)) and returns its output, a [`PhaseOutput`]. An
    /// `Ok` output is recorded in Redis with the key's recovery point and a renewal of the
    /// lease; an `Err` is returned as it is, nothing recorded, for the handler to answer.
    /// idem's own failures come back as [`PhaseError`] converted into `E`, and end the
    /// attempt: 409 when a retry took it over, 503 when Redis failed.
    ///
    /// ```
    /// # async fn f(steps: &mut idem_runtime::redis::Steps) -> Result<(), idem_runtime::phased::PhaseError> {
    /// let id: u64 = steps.run("charged", async || Ok::<_, idem_runtime::phased::PhaseError>(42)).await?;
    /// # let _ = id;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    /// As [`Phases::run`](crate::Phases::run): a name that is empty, too long or run twice
    /// in one request, an output that does not serialize, or a recorded output that does
    /// not read as `T`.
    pub async fn run<T, E, F>(&mut self, name: &str, step: F) -> Result<T, E>
    where
        T: PhaseOutput,
        E: From<PhaseError>,
        F: AsyncFnOnce() -> Result<T, E>,
    {
        check_phase_name(name);
        assert!(
            self.ran.insert(name.to_owned()),
            "idem: step `{name}` runs twice in one request; give each step its own name"
        );
        let attempt = &*self.attempt;
        if let Some(kind) = attempt.ended() {
            return Err(attempt.end(kind, Some(name), None).into());
        }
        if let Some(output) = self.recorded.get(name) {
            return Ok(recorded_output(self.idem.keyring(), attempt, name, output));
        }
        let output = step().await?;
        let json = serde_json::to_string(&output).unwrap_or_else(|error| {
            panic!(
                "idem: the output of step `{name}` ({}) cannot be serialized: {error}",
                std::any::type_name::<T>()
            )
        });
        let json = encryption::seal_output(self.idem.keyring(), &attempt.row(), name, json);
        match self.idem.store.record_phase(&self.held, name, &json).await {
            Ok(true) => Ok(output),
            Ok(false) => {
                tracing::warn!(
                    step = name,
                    "a retry took this attempt over while the step ran; its output was not recorded"
                );
                Err(attempt
                    .end(PhaseErrorKind::TakenOver, Some(name), None)
                    .into())
            }
            Err(error) => Err(attempt
                .end(PhaseErrorKind::Storage, Some(name), Some(Box::new(error)))
                .into()),
        }
    }

    /// A key for a call to another service in the step `step`, for the provider to
    /// deduplicate by: the same on every retry and takeover of this request, as
    /// [`Phases::derived_key`](crate::Phases::derived_key) documents.
    ///
    /// ```
    /// # fn f(steps: &idem_runtime::redis::Steps) {
    /// assert_eq!(steps.derived_key("send").len(), 36);
    /// # }
    /// ```
    pub fn derived_key(&self, step: &str) -> String {
        let attempt = &*self.attempt;
        derive_key(&attempt.scope, &attempt.key, attempt.generation, step)
    }

    /// The last step recorded before this attempt, when it resumes a key an earlier
    /// attempt left unfinished; `None` for a first attempt.
    ///
    /// ```
    /// # fn f(steps: &idem_runtime::redis::Steps) {
    /// if let Some(point) = steps.recovery_point() {
    ///     tracing::info!(point, "resuming a notification");
    /// }
    /// # }
    /// ```
    pub fn recovery_point(&self) -> Option<&str> {
        self.held.recovery_point.as_deref()
    }

    /// Pushes the attempt's lease a whole lease forward, from inside a step that may
    /// outlast it. Each recorded step renews the lease too.
    ///
    /// ```
    /// # async fn f(steps: &mut idem_runtime::redis::Steps) -> Result<(), idem_runtime::phased::PhaseError> {
    /// steps.extend_lease().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend_lease(&self) -> Result<(), PhaseError> {
        let attempt = &*self.attempt;
        if let Some(kind) = attempt.ended() {
            return Err(attempt.end(kind, None, None));
        }
        match self.idem.store.extend_lease(&self.held).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(attempt.end(PhaseErrorKind::TakenOver, None, None)),
            Err(error) => Err(attempt.end(PhaseErrorKind::Storage, None, Some(Box::new(error)))),
        }
    }

    /// The lease each attempt holds the key for.
    pub fn lease(&self) -> Duration {
        self.attempt.lease
    }
}

impl fmt::Debug for Steps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Steps")
            .field("scope", &self.attempt.scope)
            .field("fencing_token", &self.attempt.fencing_token)
            .field("lease", &self.attempt.lease)
            .field("recovery_point", &self.held.recovery_point)
            .finish_non_exhaustive()
    }
}
