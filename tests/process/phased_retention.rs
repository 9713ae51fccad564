//! A phased key that committed phases but has no final answer is the record that money
//! moved. However late its retry comes, it resumes the same operation: no committed phase
//! runs again and every derived key stays the same. The expiry sweep never deletes such a
//! key; operators list it and resolve it.
//!
//! Each test crashes the real example binary inside `POST /payments`, moves the key's
//! retention and lease into the past (the client comes back after a day), and retries.

use crate::phased_support;
use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use phased_support::{Example, HttpReply, count, payment_json, post_payment, send};
use support::{ALICE, TestBackend};

/// SIGABRT: what `std::process::abort` dies of.
const SIGABRT: i32 = 6;

/// Starts the example with a crash at `point`, sends one payment with `key` and waits
/// for the process to die there.
async fn crash_at<DB: TestBackend>(url: &str, point: &str, key: &str, body: &str) {
    let client = reqwest::Client::new();
    let crashing = Example::start(url, Some(point)).await;
    let first = send(post_payment(&client, &crashing.base, ALICE, key, body)).await;
    assert!(first.is_err(), "the process died before answering");
    let (status, stderr) = crashing.died().await;
    assert_eq!(status.signal(), Some(SIGABRT), "{point}: stderr: {stderr}");
}

/// The retry of a crashed payment after its retention ended: the sweep keeps the key,
/// the retry resumes it, and the provider is charged once.
async fn late_retry<DB: TestBackend>(point: &str, provider_requests: i64) {
    let (db, pool) = DB::open().await;
    let url = DB::url(&db);
    let key = format!("late-{point}");
    let body = payment_json(4_200, "EUR");
    crash_at::<DB>(&url, point, &key, &body).await;
    DB::expire_key(&pool, &key).await;

    // The sweep runs before the client is back: the key is the record that money moved.
    let report = idem::admin::Expiry::new(pool.clone())
        .sweep_once()
        .await
        .expect("sweep");
    assert_eq!(
        report.rows_deleted, 0,
        "{point}: the sweep keeps the unfinished key"
    );
    let stranded = idem::admin::stranded_keys(&pool, 10).await.expect("list");
    assert_eq!(stranded.len(), 1, "{point}: listed for operators");
    let stats = idem::admin::key_stats(&pool).await.expect("stats");
    assert_eq!(stats.stranded, 1, "{point}: counted");
    assert!(stats.oldest_stranded.is_some());

    let example = Example::start(&url, None).await;
    let client = reqwest::Client::new();
    let created = send(post_payment(&client, &example.base, ALICE, &key, &body))
        .await
        .expect("the restarted example answers");
    assert_eq!(created.status, 201, "{point}: {}", created.text());
    assert_eq!(created.header("idempotent-replayed"), None);
    assert_eq!(count(&pool, "payments").await, 1, "{point}: one payment");
    assert_eq!(
        count(&pool, "provider_charges").await,
        1,
        "{point}: one charge"
    );
    let requests = DB::scalar(
        &pool,
        "SELECT CAST(requests AS bigint) FROM provider_charges",
    )
    .await;
    assert_eq!(
        requests, provider_requests,
        "{point}: the retry reached the provider with the same derived key"
    );
    let phases = DB::texts(&pool, "SELECT phase FROM idem_phases ORDER BY recorded_at").await;
    assert_eq!(phases, ["payment_created", "charged", "receipt_queued"]);

    // Completed now, and kept for a retention from its completion: a sweep right after
    // does not delete it, and the next retry is a replay, not a second operation.
    let report = idem::admin::Expiry::new(pool.clone())
        .sweep_once()
        .await
        .expect("sweep");
    assert_eq!(report.rows_deleted, 0, "{point}: the completed key is kept");
    assert!(
        idem::admin::stranded_keys(&pool, 10)
            .await
            .expect("list")
            .is_empty()
    );
    let replayed = send(post_payment(&client, &example.base, ALICE, &key, &body))
        .await
        .expect("replay");
    assert_replay(&replayed, &created);
    assert_eq!(count(&pool, "payments").await, 1);
    assert_eq!(count(&pool, "provider_charges").await, 1);
    example.stop().await;
}

fn assert_replay(replayed: &HttpReply, original: &HttpReply) {
    assert_eq!(replayed.status, original.status, "{}", replayed.text());
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, original.body, "byte-identical replay");
}

async fn a_late_retry_after_the_charge_charges_once<DB: TestBackend>() {
    late_retry::<DB>("charged", 1).await;
}

/// The provider charged but its phase never committed: the late retry calls the
/// provider again, with the same derived key, so the provider answers with its first
/// charge instead of charging again.
async fn a_late_retry_after_the_provider_call_charges_once<DB: TestBackend>() {
    late_retry::<DB>("provider_called", 2).await;
}

/// What an operator sees of a stranded key, and a resolution that completes it with an
/// answer every later retry gets, without running any phase.
async fn an_operator_resolves_a_stranded_key_with_an_answer<DB: TestBackend>() {
    let (db, pool) = DB::open().await;
    let url = DB::url(&db);
    let body = payment_json(990, "USD");
    crash_at::<DB>(&url, "charged", "resolve-me", &body).await;
    DB::expire_key(&pool, "resolve-me").await;

    let stranded = idem::admin::stranded_keys(&pool, 10).await.expect("list");
    let [key] = stranded.as_slice() else {
        panic!("one stranded key: {stranded:?}");
    };
    assert_eq!(key.scope, ALICE.to_string());
    assert_eq!(key.key, "resolve-me");
    assert_eq!(key.method, "POST");
    assert_eq!(key.path, "/payments");
    assert_eq!(key.recovery_point, "charged");
    let names: Vec<&str> = key.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["payment_created", "charged"]);
    assert!(
        key.phases[1].output.contains("ch_"),
        "the charge's output names the provider's charge: {}",
        key.phases[1].output
    );
    // The derived key the handler gave the provider, as the provider recorded it.
    let at_provider = DB::texts(&pool, "SELECT provider_key FROM provider_charges").await;
    assert_eq!(at_provider, [key.derived_key("charge")]);

    let answer = br#"{"state":"succeeded","resolved":"by support"}"#;
    idem::admin::resolve_key(
        &pool,
        &key.scope,
        &key.key,
        &idem::admin::Resolution::completed(201, "application/json", answer.to_vec()),
        Duration::from_secs(24 * 3600),
    )
    .await
    .expect("resolve");
    assert!(
        idem::admin::stranded_keys(&pool, 10)
            .await
            .expect("list")
            .is_empty()
    );
    let again = idem::admin::resolve_key(
        &pool,
        &key.scope,
        &key.key,
        &idem::admin::Resolution::failed("refunded"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        matches!(again, Err(idem::admin::ResolveError::AlreadyCompleted)),
        "{again:?}"
    );

    let example = Example::start(&url, None).await;
    let client = reqwest::Client::new();
    let reply = send(post_payment(
        &client,
        &example.base,
        ALICE,
        "resolve-me",
        &body,
    ))
    .await
    .expect("answer");
    assert_eq!(reply.status, 201);
    assert_eq!(reply.header("idempotent-replayed"), Some("true"));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.body, answer);
    assert_eq!(count(&pool, "provider_charges").await, 1);
    let phases = DB::texts(&pool, "SELECT phase FROM idem_phases ORDER BY recorded_at").await;
    assert_eq!(phases, ["payment_created", "charged"], "nothing ran again");
    example.stop().await;
}

/// Marked failed: every retry gets the same problem answer, and nothing runs.
async fn an_operator_marks_a_stranded_key_failed<DB: TestBackend>() {
    let (db, pool) = DB::open().await;
    let url = DB::url(&db);
    let body = payment_json(990, "USD");
    crash_at::<DB>(&url, "payment_created", "fail-me", &body).await;
    DB::expire_key(&pool, "fail-me").await;
    idem::admin::resolve_key(
        &pool,
        &ALICE.to_string(),
        "fail-me",
        &idem::admin::Resolution::failed("the payment was cancelled by support"),
        Duration::from_secs(3600),
    )
    .await
    .expect("resolve");

    let example = Example::start(&url, None).await;
    let client = reqwest::Client::new();
    let first = send(post_payment(
        &client,
        &example.base,
        ALICE,
        "fail-me",
        &body,
    ))
    .await
    .expect("answer");
    assert_eq!(first.status, 500, "{}", first.text());
    assert_eq!(
        first.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(first.header("idempotent-replayed"), Some("true"));
    let problem = first.json();
    assert_eq!(
        problem["type"],
        format!("{}operation-failed", support::IDEM_PROBLEM)
    );
    assert_eq!(problem["detail"], "the payment was cancelled by support");
    let second = send(post_payment(
        &client,
        &example.base,
        ALICE,
        "fail-me",
        &body,
    ))
    .await
    .expect("answer");
    assert_eq!(second.body, first.body);
    assert_eq!(count(&pool, "provider_charges").await, 0, "never charged");
    example.stop().await;
}

/// A key whose lease is live is an attempt at work: an operator cannot resolve it.
async fn a_key_in_a_lease_cannot_be_resolved<DB: TestBackend>() {
    let (db, pool) = DB::open().await;
    let url = DB::url(&db);
    let body = payment_json(100, "EUR");
    crash_at::<DB>(&url, "payment_created", "leased", &body).await;
    // The crashed attempt's lease (3 s in the example) is still running.
    let resolved = idem::admin::resolve_key(
        &pool,
        &ALICE.to_string(),
        "leased",
        &idem::admin::Resolution::failed("no"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        matches!(resolved, Err(idem::admin::ResolveError::InLease)),
        "{resolved:?}"
    );
    let missing = idem::admin::resolve_key(
        &pool,
        &ALICE.to_string(),
        "no-such-key",
        &idem::admin::Resolution::failed("no"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        matches!(missing, Err(idem::admin::ResolveError::NotFound)),
        "{missing:?}"
    );
}

support::backend_tests!(
    a_late_retry_after_the_charge_charges_once,
    a_late_retry_after_the_provider_call_charges_once,
    an_operator_resolves_a_stranded_key_with_an_answer,
    an_operator_marks_a_stranded_key_failed,
    a_key_in_a_lease_cannot_be_resolved,
);
