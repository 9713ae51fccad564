//! The `metrics` feature: each request counts once under its outcome with its endpoint,
//! takeovers are counted, and idem's own statements are timed; read through a real
//! recorder (metrics-util's `DebuggingRecorder`) from the example's application and a
//! phased test handler against a real database, on actix-web and on axum.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use actix_web::{HttpResponse, post, web};
use idem::metrics::{REQUESTS_TOTAL, STATEMENT_SECONDS, TAKEOVERS_TOTAL};
use idem::phased::PhaseError;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::app::Account;
use support::{ALICE, Env, Framework, order_json, post, post_order, post_unkeyed};

/// A metric's name and sorted labels.
type Series = (String, Vec<(String, String)>);

/// What the process recorded so far. The recorder is global and a snapshot drains it, so
/// every test adds its snapshot here and reads only the series of its own endpoints. A
/// test's two framework runs count under the same endpoint, so the tests run one at a
/// time ([`exclusive`]), each from an empty record.
#[derive(Default)]
struct Recorded {
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
}

fn recorded() -> std::sync::MutexGuard<'static, Recorded> {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
    let snapshotter = SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test process");
        snapshotter
    });
    // A test that failed while holding the record leaves it whole: the next test clears it.
    let mut recorded = RECORDED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        match value {
            DebugValue::Counter(n) => *recorded.counters.entry(series).or_default() += n,
            DebugValue::Histogram(values) => recorded
                .histograms
                .entry(series)
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
            DebugValue::Gauge(_) => {}
        }
    }
    recorded
}

/// Held for a whole test: no other test of this file records meanwhile, and what earlier
/// tests recorded is forgotten (after installing the recorder, before the first request).
async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let serial = SERIAL.lock().await;
    let mut recorded = recorded();
    recorded.counters.clear();
    recorded.histograms.clear();
    serial
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<_> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    labels
}

impl Recorded {
    /// `outcome -> count` of requests to `endpoint`.
    fn outcomes(&self, endpoint: &str) -> HashMap<String, u64> {
        self.counters
            .iter()
            .filter(|((name, _), _)| name == REQUESTS_TOTAL)
            .filter_map(|((_, labels), n)| {
                let get = |k: &str| labels.iter().find(|(key, _)| key == k).map(|(_, v)| v);
                (get("endpoint")? == endpoint).then(|| (get("outcome").unwrap().clone(), *n))
            })
            .collect()
    }

    /// The timings of `statement` for `endpoint`'s `handler`.
    fn timings(&self, endpoint: &str, handler: &str, statement: &str) -> &[f64] {
        let series = (
            STATEMENT_SECONDS.to_owned(),
            labels(&[
                ("endpoint", endpoint),
                ("handler", handler),
                ("statement", statement),
            ]),
        );
        self.histograms.get(&series).map_or(&[], Vec::as_slice)
    }
}

fn counts(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

async fn each_request_counts_once_under_its_outcome_and_statements_are_timed() {
    let _serial = exclusive().await;
    let env = Env::new().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);
    app.call(post_order(ALICE, "m-1", &body))
        .await
        .assert_created();
    assert!(app.call(post_order(ALICE, "m-1", &body)).await.replayed());
    let other = order_json("coffee", 1, 100);
    assert_eq!(app.call(post_order(ALICE, "m-1", &other)).await.status, 422);
    assert_eq!(
        app.call(post_unkeyed("/orders", ALICE, &body)).await.status,
        400
    );
    let failing = post("/orders?fail=500", ALICE, "m-2", &body);
    assert_eq!(app.call(failing).await.status, 500);
    // A stored-body limit below the order's size: rolled back as too large.
    let small = support::service(&env.idem().max_stored_bytes(10)).await;
    assert_eq!(
        small.call(post_order(ALICE, "m-3", &body)).await.status,
        500
    );

    let recorded = recorded();
    // The example's handler is registered without a route attribute (on actix-web it is
    // generic; on axum stamped once per database, under the same name): its endpoint
    // label is its name.
    assert_eq!(
        recorded.outcomes("create_order"),
        counts(&[
            ("executed", 1),
            ("replayed", 1),
            ("mismatch", 1),
            ("invalid_key", 1),
            ("rolled_back", 1),
            ("too_large", 1),
        ])
    );
    // Every request with a valid key claimed it; three of them got as far as the commit.
    let claims = recorded.timings("create_order", "create_order", "claim");
    assert_eq!(claims.len(), 5, "{claims:?}");
    assert!(claims.iter().all(|s| (0.0..60.0).contains(s)), "{claims:?}");
    assert_eq!(
        recorded
            .timings("create_order", "create_order", "begin")
            .len(),
        5
    );
    assert_eq!(
        recorded
            .timings("create_order", "create_order", "complete")
            .len(),
        1
    );
    assert_eq!(
        recorded
            .timings("create_order", "create_order", "commit")
            .len(),
        1
    );
}

/// Panics after its phase on the first call only, leaving the key for a takeover.
#[idem::idempotent(scope = account, lease = "1s")]
#[post("/test/metered")]
async fn metered(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
    panic_once: web::Data<AtomicBool>,
) -> Result<HttpResponse, PhaseError> {
    let _ = account;
    phases
        .run("step", async |_tx| Ok::<_, PhaseError>(()))
        .await?;
    if panic_once.swap(false, Ordering::SeqCst) {
        panic!("the attempt dies after its phase");
    }
    Ok(HttpResponse::Created().body("done"))
}

/// `metered` on axum, under the same handler name.
mod axum_twin {
    use super::*;
    use axum::Extension;
    use axum::http::StatusCode;

    #[idem::axum::idempotent(scope = account, lease = "1s")]
    pub(super) async fn metered(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(panic_once): Extension<Arc<AtomicBool>>,
    ) -> Result<(StatusCode, &'static str), PhaseError> {
        let _ = account;
        phases
            .run("step", async |_tx| Ok::<_, PhaseError>(()))
            .await?;
        if panic_once.swap(false, Ordering::SeqCst) {
            panic!("the attempt dies after its phase");
        }
        Ok((StatusCode::CREATED, "done"))
    }
}

/// `metered`'s endpoint label: on actix-web its route's path pattern, which
/// `#[idempotent]` sees in the route attribute below it; on axum, where a route is not
/// an attribute, the handler's name.
fn metered_endpoint() -> &'static str {
    match Framework::current() {
        Framework::Actix => "/test/metered",
        Framework::Axum => "metered",
    }
}

async fn the_phased_form_counts_outcomes_and_takeovers() {
    let _serial = exclusive().await;
    let env = Env::new().await;
    let panic_once = web::Data::new(AtomicBool::new(true));
    let shared = panic_once.clone().into_inner();
    let app = support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(panic_once).service(metered);
        },
        move || {
            axum::Router::new()
                .route("/test/metered", axum::routing::post(axum_twin::metered))
                .layer(axum::Extension(shared))
        },
    )
    .await;
    let request = || post("/test/metered", ALICE, "phased-1", "{}");
    assert_eq!(
        app.call(request()).await.status,
        500,
        "the first attempt panics"
    );
    // The panic released the lease: the retry takes over at once and completes.
    assert_eq!(app.call(request()).await.status, 201);
    assert!(app.call(request()).await.replayed());

    let recorded = recorded();
    let endpoint = metered_endpoint();
    assert_eq!(
        recorded.outcomes(endpoint),
        counts(&[("panicked", 1), ("executed", 1), ("replayed", 1)])
    );
    let takeovers = (
        TAKEOVERS_TOTAL.to_owned(),
        labels(&[("endpoint", endpoint), ("handler", "metered")]),
    );
    assert_eq!(recorded.counters.get(&takeovers), Some(&1));
    assert_eq!(recorded.timings(endpoint, "metered", "take_over").len(), 1);
    assert_eq!(recorded.timings(endpoint, "metered", "claim").len(), 3);
}

support::both_frameworks!(
    #[actix_web::test]
    each_request_counts_once_under_its_outcome_and_statements_are_timed,
    #[actix_web::test]
    the_phased_form_counts_outcomes_and_takeovers,
);
