//! A crash at any point of `POST /payments` is recovered exactly once: the example
//! binary aborts at the crash point, is started again without it, and the client's retry
//! with the same key, once the lease has run out, completes the payment: one payment,
//! one provider charge, one outbox message, one receipt; later retries replay it byte
//! for byte.

use crate::phased_support;
use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use phased_support::{Example, HttpReply, count, payment_json, post_payment, send};
use support::{ALICE, TestBackend};

/// SIGABRT: what `std::process::abort` dies of.
const SIGABRT: i32 = 6;

/// Long enough for the example's 3 s lease plus restarts on a slow machine.
const RESUME_DEADLINE: Duration = Duration::from_secs(30);

/// Crashes the example at `point` during a payment, restarts it and retries until the
/// payment completes; checks everything the crash could have doubled. Prints the timings
/// (see them with `--nocapture`).
async fn crash_and_resume<DB: TestBackend>(point: &str, provider_requests: i64) {
    let started = Instant::now();
    let (db, pool) = DB::open().await;
    let url = DB::url(&db);
    let client = reqwest::Client::new();
    let key = format!("crash-after-{point}");
    let body = payment_json(4_200, "EUR");

    let crashing = Example::start(&url, Some(point)).await;
    let first = send(post_payment(&client, &crashing.base, ALICE, &key, &body)).await;
    assert!(
        first.is_err(),
        "the process died before answering: {:?}",
        first.map(|reply| reply.text())
    );
    let (status, stderr) = crashing.died().await;
    assert_eq!(
        status.signal(),
        Some(SIGABRT),
        "{point}: aborted; stderr: {stderr}"
    );
    assert!(
        stderr.contains(&format!("IDEM_EXAMPLE_CRASH_AFTER={point}: aborting")),
        "{point}: stderr: {stderr}"
    );
    let crashed = started.elapsed();

    let example = Example::start(&url, None).await;
    let restarted = started.elapsed();
    // The key is held until the crashed attempt's lease runs out: 409 with Retry-After
    // until then, then the retry takes over and finishes the payment.
    let retry = || post_payment(&client, &example.base, ALICE, &key, &body);
    let mut conflicts = 0;
    let created = loop {
        let reply = send(retry()).await.expect("the restarted example answers");
        match reply.status {
            409 => {
                assert_eq!(
                    reply.header("retry-after"),
                    Some("1"),
                    "{point}: {}",
                    reply.text()
                );
                conflicts += 1;
                assert!(
                    started.elapsed() < RESUME_DEADLINE,
                    "{point}: still 409 after {:?}",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            201 => break reply,
            other => panic!("{point}: unexpected {other}: {}", reply.text()),
        }
    };
    let resumed = started.elapsed();

    assert_eq!(
        created.header("idempotent-replayed"),
        None,
        "{point}: ran, not replayed"
    );
    assert_eq!(created.header("content-type"), Some("application/json"));
    let payment = created.json();
    let id = payment["id"].as_i64().expect("integer id");
    assert_eq!(
        created.header("location"),
        Some(format!("/payments/{id}").as_str())
    );
    assert_eq!(payment["state"], "succeeded", "{point}: {payment}");
    assert_eq!(payment["amount_cents"], 4_200);
    assert_eq!(payment["currency"], "EUR");
    assert!(
        payment["provider_charge_id"]
            .as_str()
            .is_some_and(|c| c.starts_with("ch_"))
    );

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
        "{point}: calls that reached the provider with the payment's derived key"
    );
    let messages = DB::scalar(
        &pool,
        "SELECT count(*) FROM idem_outbox WHERE topic = 'payment_receipts'",
    )
    .await;
    assert_eq!(messages, 1, "{point}: one receipt message");
    let phases = DB::texts(&pool, "SELECT phase FROM idem_phases ORDER BY recorded_at").await;
    assert_eq!(phases, ["payment_created", "charged", "receipt_queued"]);

    // The relay delivers the receipt (at least once; the message id deduplicates).
    let delivered = wait_for_receipt(&pool).await;
    assert_eq!(delivered, (1, id), "{point}: one receipt, for the payment");

    let replayed = send(retry()).await.expect("replay");
    assert_replay(&replayed, &created);
    let shown = send(
        client
            .get(format!("{}/payments/{id}", example.base))
            .header("x-account-id", ALICE.to_string()),
    )
    .await
    .expect("GET");
    assert_eq!(shown.status, 200);
    assert_eq!(shown.body, created.body, "GET shows the payment as created");
    assert_eq!(count(&pool, "payments").await, 1);
    assert_eq!(count(&pool, "provider_charges").await, 1);

    example.stop().await;
    eprintln!(
        "{point}: crashed after {crashed:?}, restarted at {restarted:?}, 201 at {resumed:?} \
         after {conflicts} x 409, done at {:?}",
        started.elapsed()
    );
}

/// `(receipts, payment id)` once the relay has delivered the receipt.
async fn wait_for_receipt<DB: TestBackend>(pool: &sqlx::Pool<DB>) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let receipts = DB::scalar(pool, "SELECT count(*) FROM receipts").await;
        if receipts > 0 {
            let payment = DB::scalar(pool, "SELECT max(payment_id) FROM receipts").await;
            return (receipts, payment);
        }
        assert!(Instant::now() < deadline, "the relay delivered no receipt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_replay(replayed: &HttpReply, original: &HttpReply) {
    assert_eq!(replayed.status, original.status);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, original.body, "byte-identical replay");
    assert_eq!(replayed.header("location"), original.header("location"));
    assert_eq!(
        replayed.header("content-type"),
        original.header("content-type")
    );
}

async fn a_crash_after_the_payment_is_created_is_resumed_once<DB: TestBackend>() {
    crash_and_resume::<DB>("payment_created", 1).await;
}

/// The provider charged, but the phase that records the charge never committed: the
/// retry runs `charged` again, and the derived key makes the provider answer with the
/// first charge instead of charging twice.
async fn a_crash_between_the_provider_call_and_its_record_charges_once<DB: TestBackend>() {
    crash_and_resume::<DB>("provider_called", 2).await;
}

async fn a_crash_after_the_charge_is_resumed_once<DB: TestBackend>() {
    crash_and_resume::<DB>("charged", 1).await;
}

/// Every phase committed, but no response was recorded: the retry runs no phase again
/// and builds the response from the recorded outputs.
async fn a_crash_after_the_receipt_is_queued_is_resumed_once<DB: TestBackend>() {
    crash_and_resume::<DB>("receipt_queued", 1).await;
}

support::backend_tests!(
    a_crash_after_the_payment_is_created_is_resumed_once,
    a_crash_between_the_provider_call_and_its_record_charges_once,
    a_crash_after_the_charge_is_resumed_once,
    a_crash_after_the_receipt_is_queued_is_resumed_once,
);
