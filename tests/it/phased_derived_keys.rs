//! Derived keys for downstream providers: the same on every retry and takeover of one
//! request, different for another scope using the same client key, for another step, and
//! for a new operation under a key reused after its retention.

use crate::phased_support;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{post, web};
use axum::extract::Query;
use axum::{Extension, Router};
use futures_util::future::select;
use idem::phased::PhaseError;
use phased_support::{Answer, Gate, PAST_LEASE};
use serde_json::json;
use support::app::Account;
use support::{ALICE, BOB, Env, Reply, TestApp, post};

#[derive(Debug, Default)]
struct Control {
    attempts: AtomicUsize,
    /// A fresh attempt dies here when the request asks for it (`?die=1`).
    gate: Gate,
}

/// Records the `charge` key in a phase (as a provider would have seen it), then answers
/// with the recorded key beside the keys this attempt derives. A fresh attempt dies when
/// `die`.
async fn derive(
    phases: &mut idem::Phases<sqlx::Postgres>,
    die: bool,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let charge_key = phases.derived_key("charge");
    let sent: String = phases
        .run("charged", async |_tx| {
            Ok::<_, PhaseError>(charge_key.clone())
        })
        .await?;
    // Only a fresh attempt dies: the one that takes over goes on.
    if die && phases.recovery_point().is_none() {
        control.gate.die().await;
    }
    Ok(Answer::json(
        200,
        &json!({
            "sent": sent,
            "charge": charge_key,
            "refund": phases.derived_key("refund"),
            "attempt": attempt,
        }),
    ))
}

/// `POST /test/derive` on actix-web.
#[post("/test/derive")]
#[idem::idempotent(scope = account, lease = "1s")]
async fn derive_on_actix(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
    query: web::Query<Vec<(String, String)>>,
    control: web::Data<Control>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    derive(&mut phases, !query.is_empty(), &control).await
}

/// `POST /test/derive` on axum.
#[idem::axum::idempotent(scope = account, lease = "1s")]
async fn derive_on_axum(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
    Extension(control): Extension<Arc<Control>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    derive(&mut phases, !query.is_empty(), &control).await
}

async fn app(env: &Env, control: &web::Data<Control>) -> TestApp {
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control).service(derive_on_actix);
        },
        move || {
            Router::new()
                .route("/test/derive", axum::routing::post(derive_on_axum))
                .layer(Extension(axum_control))
        },
    )
    .await
}

fn keys(reply: &Reply) -> (String, String, String) {
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let body = reply.json();
    let text = |name: &str| body[name].as_str().expect("a key").to_owned();
    (text("sent"), text("charge"), text("refund"))
}

fn assert_uuid_v8(key: &str) {
    assert_eq!(key.len(), 36, "{key}");
    let groups: Vec<&str> = key.split('-').collect();
    assert_eq!(
        groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{key}"
    );
    assert!(
        key.bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "lowercase hex: {key}"
    );
    assert!(groups[2].starts_with('8'), "version 8: {key}");
    assert!(
        matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
        "RFC 9562 variant: {key}"
    );
}

async fn keys_differ_across_scopes_and_steps_for_one_client_key() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;

    let alice = keys(
        &app.call(post("/test/derive", ALICE, "shared-key", "{}"))
            .await,
    );
    let bob = keys(
        &app.call(post("/test/derive", BOB, "shared-key", "{}"))
            .await,
    );
    let alice_other = keys(
        &app.call(post("/test/derive", ALICE, "other-key", "{}"))
            .await,
    );

    for key in [&alice.1, &alice.2, &bob.1, &bob.2, &alice_other.1] {
        assert_uuid_v8(key);
    }
    assert_eq!(
        alice.0, alice.1,
        "the phase saw the key the handler derives"
    );
    assert_ne!(
        alice.1, bob.1,
        "two accounts, one Idempotency-Key: two provider keys"
    );
    assert_ne!(alice.2, bob.2);
    assert_ne!(alice.1, alice.2, "one key per step");
    assert_ne!(alice.1, alice_other.1, "one key per client key");
}

async fn keys_are_stable_across_replays_and_takeovers() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;
    let request = || post("/test/derive?die=1", ALICE, "stable", "{}");

    // The first attempt records the key it sent in `charged`, then dies.
    let died = select(app.call(request()), Box::pin(control.gate.reached())).await;
    assert!(matches!(died, futures_util::future::Either::Right(_)));
    drop(died);
    let recorded: String =
        sqlx::query_scalar("SELECT output #>> '{}' FROM idem_phases WHERE phase = 'charged'")
            .fetch_one(&env.pool)
            .await
            .expect("the first attempt recorded its key");
    tokio::time::sleep(PAST_LEASE).await;

    let resumed = app.call(request()).await;
    let (sent, charge, refund) = keys(&resumed);
    assert_eq!(resumed.json()["attempt"], 2, "the retry took over");
    assert_eq!(
        sent, recorded,
        "the recorded output is returned, not re-run"
    );
    assert_eq!(
        charge, recorded,
        "the attempt that took over derives the same key"
    );
    assert_uuid_v8(&refund);

    let replayed = app.call(request()).await;
    replayed.assert_replay_of(&resumed);
}

/// A completed key reused after its retention is a new operation: it must not reach the
/// provider with the old operation's keys. A key in progress is never reclaimed, even
/// past its retention.
async fn a_key_reused_after_its_retention_gets_new_keys() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;
    let request = || post("/test/derive", ALICE, "reused", "{}");

    let before = keys(&app.call(request()).await);
    sqlx::query("UPDATE idem_keys SET expires_at = now() - interval '1 second'")
        .execute(&env.pool)
        .await
        .expect("expire the key");
    let after = app.call(request()).await;
    assert!(!after.replayed(), "an expired key is not replayed");
    let after = keys(&after);
    assert_ne!(before.1, after.1, "a new generation, new derived keys");
    let phases: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_phases")
        .fetch_one(&env.pool)
        .await
        .expect("count phases");
    assert_eq!(phases, 1, "the old generation's phases are gone");

    // Past retention but in progress: neither form may reclaim it. The same request
    // waits for the lease; another endpoint's request is told the key is someone else's.
    sqlx::query(
        "UPDATE idem_keys SET state = 'started', expires_at = now() - interval '1 second', \
         locked_until = clock_timestamp() + interval '1 minute'",
    )
    .execute(&env.pool)
    .await
    .expect("lease the expired key");
    app.call(request())
        .await
        .assert_idem_problem(409, "request-in-progress");
    app.call(post(
        "/orders",
        ALICE,
        "reused",
        &support::order_json("tea", 1, 100),
    ))
    .await
    .assert_idem_problem(422, "idempotency-key-reused");
}

support::both_frameworks!(
    #[actix_web::test]
    keys_differ_across_scopes_and_steps_for_one_client_key,
    #[actix_web::test]
    keys_are_stable_across_replays_and_takeovers,
    #[actix_web::test]
    a_key_reused_after_its_retention_gets_new_keys,
);
