//! The `metrics` feature: each request counts once under its outcome with its endpoint,
//! takeovers are counted, and idem's own statements are timed; read through a real
//! recorder (metrics-util's `DebuggingRecorder`) from the example's application and a
//! phased test handler against a real database.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use actix_web::{HttpResponse, post, web};
use idem::PhaseError;
use idem::metrics::{REQUESTS_TOTAL, STATEMENT_SECONDS, TAKEOVERS_TOTAL};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::app::Account;
use support::{ALICE, Env, order_json, post, post_order, post_unkeyed};

/// A metric's name and sorted labels.
type Series = (String, Vec<(String, String)>);

/// What the process recorded so far. The recorder is global and a snapshot drains it, so
/// every test adds its snapshot here and reads only the series of its own endpoints.
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
    let mut recorded = RECORDED.get_or_init(Mutex::default).lock().unwrap();
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

#[actix_web::test]
async fn each_request_counts_once_under_its_outcome_and_statements_are_timed() {
    drop(recorded()); // install the recorder before the first request
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
    // The support app's handler is generic, registered without a route attribute: its
    // endpoint label is its name.
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

#[actix_web::test]
async fn the_phased_form_counts_outcomes_and_takeovers() {
    drop(recorded());
    let env = Env::new().await;
    let panic_once = web::Data::new(AtomicBool::new(true));
    let app = support::service_with(&env.idem(), move |cfg| {
        cfg.app_data(panic_once).service(metered);
    })
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
    assert_eq!(
        recorded.outcomes("/test/metered"),
        counts(&[("panicked", 1), ("executed", 1), ("replayed", 1)])
    );
    let takeovers = (
        TAKEOVERS_TOTAL.to_owned(),
        labels(&[("endpoint", "/test/metered"), ("handler", "metered")]),
    );
    assert_eq!(recorded.counters.get(&takeovers), Some(&1));
    assert_eq!(
        recorded
            .timings("/test/metered", "metered", "take_over")
            .len(),
        1
    );
    assert_eq!(
        recorded.timings("/test/metered", "metered", "claim").len(),
        3
    );
}
