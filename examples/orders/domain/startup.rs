//! Startup, the same for both binaries: the environment, the database of `DATABASE_URL`,
//! the migrations, the lines printed for operators, the listener, the webhook verifier,
//! the metrics recorder, the outbox relay, the expiry task and, with `REDIS_URL`, the
//! Redis that `POST /notifications` keeps its keys in. A binary brings only its
//! [`Server`]: how its framework serves a [`Service`] on the bound listener.

use std::future::Future;
use std::net::TcpListener;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Pool, Postgres, Sqlite};

use super::notifications::Notifications;
use super::orders::ACQUIRE_TIMEOUT;
use super::payment_store::PaymentStore;
use super::payments::{CRASH_POINTS, Settings, spawn_relay};
use super::store::setup;
use super::webhooks::{DEFAULT_SECRET, SENDER, WebhookStore};

/// The SQLite database without `DATABASE_URL`.
const DEFAULT_DATABASE_URL: &str = "sqlite://orders.db";

/// Bucket bounds in seconds for the time spent in idem's statements: a claim on a local
/// database takes about a millisecond, one waiting for a duplicate up to `claim_wait`.
const STATEMENT_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// What a framework serves: idem on the database, the payments' settings, the webhook
/// verifier, the metrics and, when `REDIS_URL` is set, the notifications, on a listener
/// already bound.
#[derive(Debug)]
pub(crate) struct Service<DB: PaymentStore + WebhookStore> {
    pub(crate) idem: idem::Idem<DB>,
    /// `POST /notifications`, whose keys are in Redis: `None` without `REDIS_URL`, and the
    /// route is then not registered.
    pub(crate) notifications: Option<Notifications>,
    pub(crate) listener: TcpListener,
    pub(crate) settings: Settings,
    pub(crate) verifier: idem::WebhookVerifier,
    pub(crate) metrics: PrometheusHandle,
}

/// A web framework's server of the service on the database `DB`. Implemented for each
/// database (rather than generic in `serve`) so that a framework whose handlers name their
/// database (axum's) can require its own per-database routes.
pub(crate) trait Server<DB: PaymentStore + WebhookStore> {
    /// Serves `service` until the server stops.
    fn serve(service: Service<DB>) -> impl Future<Output = std::io::Result<()>>;
}

/// The binary's `main`: reads the environment, opens the database and serves it with `S`.
pub(crate) async fn main<S: Server<Postgres> + Server<Sqlite>>() -> ExitCode {
    let database_url = std::env::var("DATABASE_URL")
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let bind_addr = std::env::var("BIND_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let crash_after = match std::env::var("IDEM_EXAMPLE_CRASH_AFTER") {
        Err(_) => None,
        Ok(point) => match CRASH_POINTS.iter().find(|p| **p == point) {
            Some(point) => Some(*point),
            None => {
                eprintln!(
                    "orders: IDEM_EXAMPLE_CRASH_AFTER={point:?} is not a crash point; use one of {}",
                    CRASH_POINTS.join(", ")
                );
                return ExitCode::FAILURE;
            }
        },
    };

    if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        println!("orders: database PostgreSQL (DATABASE_URL)");
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(&database_url)
            .await;
        match pool {
            Ok(pool) => serve::<S, _>(pool, &bind_addr, crash_after).await,
            Err(error) => {
                eprintln!(
                    "orders: cannot connect to DATABASE_URL within {ACQUIRE_TIMEOUT:?} (is the \
                     database up and reachable?): {error}"
                );
                ExitCode::FAILURE
            }
        }
    } else if database_url.starts_with("sqlite:") {
        let options = match SqliteConnectOptions::from_str(&database_url) {
            Ok(options) => options,
            Err(error) => {
                eprintln!("orders: DATABASE_URL is not a SQLite URL: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!(
            "orders: database SQLite {}",
            options.get_filename().display()
        );
        // WAL lets reads go on while a request writes; writers take turns (idem's
        // `BEGIN IMMEDIATE`), each waiting up to the busy timeout for the lock.
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(20)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await;
        match pool {
            Ok(pool) => serve::<S, _>(pool, &bind_addr, crash_after).await,
            Err(error) => {
                eprintln!("orders: cannot open DATABASE_URL: {error}");
                ExitCode::FAILURE
            }
        }
    } else {
        eprintln!(
            "orders: DATABASE_URL must start with postgres://, postgresql:// or sqlite:, \
             or be unset for {DEFAULT_DATABASE_URL}"
        );
        ExitCode::FAILURE
    }
}

/// Migrates, then serves the same application on either database.
async fn serve<S: Server<DB>, DB: PaymentStore + WebhookStore>(
    pool: Pool<DB>,
    bind_addr: &str,
    crash_after: Option<&'static str>,
) -> ExitCode {
    if let Err(error) = setup(&pool).await {
        eprintln!("orders: migrations failed: {error}");
        return ExitCode::FAILURE;
    }
    let idem = idem::Idem::new(pool.clone());
    let notifications = match redis_url() {
        None => None,
        Some(url) => match idem::redis::RedisStore::connect(&url).await {
            Ok(store) => {
                println!("orders: notifications' keys in Redis (REDIS_URL)");
                Some(Notifications::new(store, idem.settings().clone()))
            }
            Err(error) => {
                eprintln!(
                    "orders: cannot connect to REDIS_URL (is Redis up and reachable?): {error}"
                );
                return ExitCode::FAILURE;
            }
        },
    };

    // What operators should know: which endpoints are idempotent and how long keys live.
    // Once a line: the axum binary registers each handler once per database.
    let mut printed = Vec::new();
    for policy in idem::policies() {
        // Linked in either case, served only with Redis.
        if notifications.is_none() && policy.handler().ends_with(NOTIFICATIONS_HANDLER) {
            continue;
        }
        let route = policy.route().map_or_else(
            || policy.handler().to_owned(),
            |(method, path)| format!("{method} {path}"),
        );
        let lease = policy
            .lease()
            .map(|lease| format!(", lease {}ms", lease.as_millis()))
            .unwrap_or_default();
        let line = format!(
            "orders: idempotent {route}: scope {}, retention {}s{lease}",
            policy.scope(),
            policy.retention().as_secs()
        );
        if !printed.contains(&line) {
            println!("{line}");
            printed.push(line);
        }
    }
    // And which mutate without a key, and why that is safe.
    for exemption in idem::registry::exemptions() {
        let route = exemption.route().map_or_else(
            || exemption.handler().to_owned(),
            |(method, path)| format!("{method} {path}"),
        );
        let line = format!("orders: exempt {route}: {}", exemption.reason());
        if !printed.contains(&line) {
            println!("{line}");
            printed.push(line);
        }
    }
    // Bound before the app is built: the payments call the provider at this address.
    let listener = match TcpListener::bind(bind_addr).and_then(|l| Ok((l.local_addr()?, l))) {
        Ok(bound) => bound,
        Err(error) => {
            eprintln!("orders: cannot listen on {bind_addr}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (local_addr, listener) = listener;
    // The provider signs its webhooks with this secret, and the receiver verifies them.
    let secret =
        std::env::var("PROVIDER_WEBHOOK_SECRET").unwrap_or_else(|_| DEFAULT_SECRET.to_owned());
    let verifier = match idem::WebhookVerifier::new(SENDER, &secret) {
        Ok(verifier) => verifier,
        Err(error) => {
            eprintln!("orders: PROVIDER_WEBHOOK_SECRET: {error}");
            return ExitCode::FAILURE;
        }
    };
    let settings =
        Settings::new(format!("http://{local_addr}"), crash_after).with_webhooks(verifier.clone());
    let metrics = match install_metrics() {
        Ok(metrics) => metrics,
        Err(error) => {
            eprintln!("orders: cannot install the metrics recorder: {error}");
            return ExitCode::FAILURE;
        }
    };
    let relay = spawn_relay(pool.clone());
    // Keys past their retention are deleted in short batches; without this task the key
    // table only grows.
    let expiry = idem::admin::Expiry::new(pool.clone()).spawn();
    let service = Service {
        idem,
        notifications,
        listener,
        settings,
        verifier,
        metrics,
    };
    // The listener is bound and listening: connections wait in its backlog until the
    // server accepts them.
    println!("orders: serving on http://{local_addr}");
    let served = S::serve(service).await;
    relay.stop().await;
    expiry.stop().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("orders: server failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The name both binaries give the `POST /notifications` handler, whose policy is printed
/// only when the route is served.
const NOTIFICATIONS_HANDLER: &str = "create_notification";

/// `REDIS_URL`, trimmed, when it is set and not empty.
fn redis_url() -> Option<String> {
    std::env::var("REDIS_URL")
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// Installs the Prometheus recorder as the process's `metrics` recorder.
fn install_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(idem::metrics::STATEMENT_SECONDS.to_owned()),
            &STATEMENT_BUCKETS,
        )
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|error| error.to_string())?;
    idem::metrics::describe();
    Ok(handle)
}
