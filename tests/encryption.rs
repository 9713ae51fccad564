//! The `encryption` feature: what idem stores for replay is not the plaintext, replays
//! return the plaintext, old keys still open after a rotation, and a value that does not
//! open, or that should be sealed and is not, is answered with a 500 problem, never
//! replayed. The generic tests run on both databases.

mod support;

use std::time::{Duration, SystemTime};

use idem::encryption::Keyring;
use sqlx::{Pool, Postgres, Sqlite};
use support::{ALICE, Env, IDEM_PROBLEM, TestBackend, by_database, order_json, post_order};

fn first() -> Keyring {
    Keyring::new("2026-05", [0x11; 32])
}

fn second() -> Keyring {
    Keyring::new("2026-11", [0x22; 32]).with_old_key("2026-05", [0x11; 32])
}

/// `(response_headers, response_body)` as stored for `key`.
async fn stored(env: &Env, key: &str) -> (Vec<u8>, Vec<u8>) {
    sqlx::query_as("SELECT response_headers, response_body FROM idem_keys WHERE idem_key = $1")
        .bind(key)
        .fetch_one(&env.pool)
        .await
        .expect("the key row")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn stored_responses_are_ciphertext_and_replay_as_plaintext() {
    let env = Env::new().await;
    let app = support::service(&env.idem().encrypt_with(first())).await;
    let body = order_json("secret tea", 1, 100);
    let created = app.call(post_order(ALICE, "enc-1", &body)).await;
    let id = created.assert_created();

    let (headers, stored_body) = stored(&env, "enc-1").await;
    assert!(
        !contains(&stored_body, b"secret tea"),
        "the body is not in clear"
    );
    assert_ne!(stored_body, created.body.to_vec());
    let location = format!("/orders/{id}");
    assert!(
        !contains(&headers, location.as_bytes()),
        "nor are the headers"
    );
    assert!(
        contains(&headers, b"2026-05"),
        "the key id is stored beside the value"
    );
    // The fingerprint and the scope stay usable for lookups.
    let (scope, fingerprint_len): (String, i32) = sqlx::query_as(
        "SELECT scope, length(request_hash) FROM idem_keys WHERE idem_key = 'enc-1'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        (scope.as_str(), fingerprint_len),
        (ALICE.to_string().as_str(), 32)
    );

    let replay = app.call(post_order(ALICE, "enc-1", &body)).await;
    replay.assert_replay_of(&created);
    assert_eq!(replay.header("location"), Some(location.as_str()));
    // A mismatch is still found from the clear fingerprint.
    let other = order_json("other tea", 1, 100);
    assert_eq!(
        app.call(post_order(ALICE, "enc-1", &other)).await.status,
        422
    );
}

async fn after_a_rotation_old_rows_replay_and_new_rows_use_the_new_key() {
    let env = Env::new().await;
    let body = order_json("tea", 1, 100);
    let before = support::service(&env.idem().encrypt_with(first())).await;
    let old = before.call(post_order(ALICE, "rot-old", &body)).await;
    old.assert_created();

    let after = support::service(&env.idem().encrypt_with(second())).await;
    after
        .call(post_order(ALICE, "rot-old", &body))
        .await
        .assert_replay_of(&old);
    let new = after.call(post_order(ALICE, "rot-new", &body)).await;
    new.assert_created();
    let (headers, _) = stored(&env, "rot-new").await;
    assert!(
        contains(&headers, b"2026-11"),
        "sealed with the current key"
    );

    // Once the old key is dropped, its rows no longer open: a 500, never ciphertext.
    let dropped =
        support::service(&env.idem().encrypt_with(Keyring::new("2026-11", [0x22; 32]))).await;
    dropped
        .call(post_order(ALICE, "rot-new", &body))
        .await
        .assert_replay_of(&new);
    let unreadable = dropped.call(post_order(ALICE, "rot-old", &body)).await;
    unreadable.assert_idem_problem(500, "stored-response-unreadable");
    assert!(!unreadable.replayed());
}

async fn a_tampered_row_gets_a_500_problem_not_garbage() {
    let env = Env::new().await;
    let app = support::service(&env.idem().encrypt_with(first())).await;
    let body = order_json("tea", 1, 100);
    app.call(post_order(ALICE, "tampered", &body))
        .await
        .assert_created();
    sqlx::query(
        "UPDATE idem_keys SET response_body = set_byte(response_body, length(response_body) - 1, \
                get_byte(response_body, length(response_body) - 1) # 1) \
          WHERE idem_key = 'tampered'",
    )
    .execute(&env.pool)
    .await
    .expect("flip a bit of the stored body");

    let replay = app.call(post_order(ALICE, "tampered", &body)).await;
    let problem = replay.assert_idem_problem(500, "stored-response-unreadable");
    assert_eq!(
        problem["type"],
        format!("{IDEM_PROBLEM}stored-response-unreadable")
    );
    assert!(!replay.replayed());

    // A sealed row read by an idem without a keyring is not replayed either.
    let plain = support::service(&env.idem()).await;
    app.call(post_order(ALICE, "sealed", &body))
        .await
        .assert_created();
    plain
        .call(post_order(ALICE, "sealed", &body))
        .await
        .assert_idem_problem(500, "stored-response-unreadable");
}

/// A phased handler whose answer names a secret.
#[idem::idempotent(scope = account, lease = "1s")]
async fn phased_secret<DB: TestBackend>(
    account: support::app::Account,
    phases: idem::Phases<DB>,
) -> Result<actix_web::HttpResponse, idem::phased::PhaseError> {
    let _ = account;
    let n: i32 = phases
        .run("step", async |_tx| Ok::<_, idem::phased::PhaseError>(7))
        .await?;
    Ok(actix_web::HttpResponse::Created().body(format!("phased secret {n}")))
}

/// `phased_secret` and `phased_unfinished` on axum, once per database.
macro_rules! axum_phased {
    ($module:ident, $db:ty) => {
        mod $module {
            use axum::http::StatusCode;

            #[idem::axum::idempotent(scope = account, lease = "1s")]
            pub(super) async fn phased_secret(
                account: super::support::app::Account,
                phases: idem::Phases<$db>,
            ) -> Result<(StatusCode, String), idem::phased::PhaseError> {
                let _ = account;
                let n: i32 = phases
                    .run("step", async |_tx| Ok::<_, idem::phased::PhaseError>(7))
                    .await?;
                Ok((StatusCode::CREATED, format!("phased secret {n}")))
            }

            #[idem::axum::idempotent(scope = account, lease = "1s")]
            pub(super) async fn phased_charge(
                account: super::support::app::Account,
                headers: axum::http::HeaderMap,
                phases: idem::Phases<$db>,
            ) -> Result<(StatusCode, String), idem::phased::PhaseError> {
                let charge = phases
                    .run("charge", async |mut tx| {
                        super::charge::<$db>(&mut tx, account.id()).await
                    })
                    .await?;
                if headers.contains_key("x-fail") {
                    return Ok((StatusCode::SERVICE_UNAVAILABLE, String::new()));
                }
                Ok((StatusCode::CREATED, charge))
            }

            #[idem::axum::idempotent(scope = account, lease = "1s")]
            pub(super) async fn phased_unfinished(
                account: super::support::app::Account,
                phases: idem::Phases<$db>,
            ) -> Result<StatusCode, idem::phased::PhaseError> {
                let _ = account;
                phases
                    .run("step", async |_tx| Ok::<_, idem::phased::PhaseError>(1))
                    .await?;
                Ok(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
    };
}

axum_phased!(on_postgres, sqlx::Postgres);
axum_phased!(on_sqlite, sqlx::Sqlite);

/// The phased form seals too, to the life of the key: after the retention the key
/// starts a new generation, and the old life's response copied into its row does not
/// open.
async fn the_phased_form_stores_ciphertext_sealed_to_the_keys_life<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let app = support::service_with_twin(
        &env.idem().encrypt_with(first()),
        |cfg| {
            cfg.route(
                "/test/phased-secret",
                actix_web::web::post().to(phased_secret::<DB>),
            );
        },
        || {
            let handler = by_database::<DB, _>(
                || axum::routing::post(on_postgres::phased_secret),
                || axum::routing::post(on_sqlite::phased_secret),
            );
            axum::Router::new().route("/test/phased-secret", handler)
        },
    )
    .await;
    let request = || support::post("/test/phased-secret", ALICE, "phased-enc", "{}");
    let created = app.call(request()).await;
    assert_eq!(created.status, 201);
    assert_eq!(&created.body[..], b"phased secret 7");
    let (old_headers, old_body) = DB::response(&env.pool, "phased-enc").await;
    assert!(!contains(&old_body, b"phased secret"));
    app.call(request()).await.assert_replay_of(&created);

    DB::expire_key(&env.pool, "phased-enc").await;
    let again = app.call(request()).await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed(), "a new life of the key");
    DB::overwrite(&env.pool, "phased-enc", &old_headers, &old_body).await;
    let replay = app.call(request()).await;
    replay.assert_idem_problem(500, "stored-response-unreadable");
    assert!(!replay.replayed());
}

/// Reads and rewrites a key row's stored response as someone with write access to the
/// database could. `$n` placeholders work on both databases.
trait RowAccess: TestBackend {
    /// `(response_headers, response_body)` as stored for `key`.
    fn response(pool: &Pool<Self>, key: &str) -> impl Future<Output = (Vec<u8>, Vec<u8>)>;

    /// Overwrites the stored response of `key`.
    fn overwrite(
        pool: &Pool<Self>,
        key: &str,
        headers: &[u8],
        body: &[u8],
    ) -> impl Future<Output = ()>;
}

macro_rules! row_access {
    ($db:ty) => {
        impl RowAccess for $db {
            async fn response(pool: &Pool<Self>, key: &str) -> (Vec<u8>, Vec<u8>) {
                sqlx::query_as(
                    "SELECT response_headers, response_body FROM idem_keys WHERE idem_key = $1",
                )
                .bind(key)
                .fetch_one(pool)
                .await
                .expect("the key row")
            }

            async fn overwrite(pool: &Pool<Self>, key: &str, headers: &[u8], body: &[u8]) {
                let done = sqlx::query(
                    "UPDATE idem_keys SET response_headers = $2, response_body = $3 \
                      WHERE idem_key = $1",
                )
                .bind(key)
                .bind(headers)
                .bind(body)
                .execute(pool)
                .await
                .expect("rewrite the stored response");
                assert_eq!(done.rows_affected(), 1, "the key {key} exists");
            }
        }
    };
}
row_access!(Postgres);
row_access!(Sqlite);

/// An attacker who can write to the database replaces a sealed response with a plaintext
/// one of their choosing (the seal's marker gone): with a keyring, idem refuses it.
async fn a_response_stripped_of_its_seal_is_not_replayed<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem().encrypt_with(first())).await;
    let body = order_json("tea", 1, 100);
    app.call(post_order(ALICE, "stripped", &body))
        .await
        .assert_created();
    let (headers, sealed) = DB::response(&env.pool, "stripped").await;
    assert!(!contains(&sealed, b"tea"), "sealed to begin with");
    assert!(!headers.is_empty());

    let forged = br#"{"id":666,"item":"forged"}"#;
    DB::overwrite(
        &env.pool,
        "stripped",
        b"content-type: application/json\r\n",
        forged,
    )
    .await;
    let replay = app.call(post_order(ALICE, "stripped", &body)).await;
    replay.assert_idem_problem(500, "stored-response-unreadable");
    assert!(!replay.replayed());
    assert!(!contains(&replay.body, b"forged"));

    // Stripping only one of the two values is refused as well.
    DB::overwrite(&env.pool, "stripped", &headers, forged).await;
    app.call(post_order(ALICE, "stripped", &body))
        .await
        .assert_idem_problem(500, "stored-response-unreadable");
}

/// Turning encryption on in a running deployment: rows stored before replay while the
/// migration allowance lasts, and are refused once it has passed.
async fn old_plaintext_rows_replay_only_during_the_migration_allowance<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let body = order_json("tea", 1, 100);
    let plain = support::service(&env.idem()).await;
    let created = plain.call(post_order(ALICE, "legacy", &body)).await;
    created.assert_created();

    let until = SystemTime::now() + Duration::from_secs(7 * 24 * 3600);
    let migrating = support::service(
        &env.idem()
            .encrypt_with(first().allow_plaintext_until(until)),
    )
    .await;
    migrating
        .call(post_order(ALICE, "legacy", &body))
        .await
        .assert_replay_of(&created);
    // New rows are sealed all the same.
    let new = migrating.call(post_order(ALICE, "legacy-new", &body)).await;
    new.assert_created();
    let (_, sealed) = DB::response(&env.pool, "legacy-new").await;
    assert!(!contains(&sealed, b"tea"));

    let over = first().allow_plaintext_until(SystemTime::UNIX_EPOCH);
    let after = support::service(&env.idem().encrypt_with(over)).await;
    after
        .call(post_order(ALICE, "legacy", &body))
        .await
        .assert_idem_problem(500, "stored-response-unreadable");
    let strict = support::service(&env.idem().encrypt_with(first())).await;
    strict
        .call(post_order(ALICE, "legacy", &body))
        .await
        .assert_idem_problem(500, "stored-response-unreadable");
    strict
        .call(post_order(ALICE, "legacy-new", &body))
        .await
        .assert_replay_of(&new);
}

/// A key reused after its retention begins a new life (a new generation). The response
/// sealed in an earlier life, copied into the new life's row, does not open there: the
/// client gets a 500, never the old answer. Both ways a life ends are covered: the
/// sweep deleted the row (the new request inserts afresh), or it had not yet (the new
/// request reclaims the expired row).
async fn an_earlier_lifes_response_does_not_open_in_a_later_life<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem().encrypt_with(first())).await;
    let body = order_json("tea", 1, 100);
    for (key, deleted) in [("reused-deleted", true), ("reused-reclaimed", false)] {
        let old = app.call(post_order(ALICE, key, &body)).await;
        old.assert_created();
        let (old_headers, old_body) = DB::response(&env.pool, key).await;
        DB::expire_key(&env.pool, key).await;
        if deleted {
            let sql = format!("DELETE FROM idem_keys WHERE idem_key = '{key}'");
            DB::texts(&env.pool, &sql).await;
        }

        let new = app.call(post_order(ALICE, key, &body)).await;
        new.assert_created();
        assert_ne!(new.body, old.body, "{key}: a new order");
        app.call(post_order(ALICE, key, &body))
            .await
            .assert_replay_of(&new);

        DB::overwrite(&env.pool, key, &old_headers, &old_body).await;
        let replay = app.call(post_order(ALICE, key, &body)).await;
        replay.assert_idem_problem(500, "stored-response-unreadable");
        assert!(!replay.replayed(), "{key}");
    }
}

/// The provider's answer a phase records: what must not be stored in clear.
const CHARGE: &str = "ch_secret_4242";

/// A phase's effect, counted in `orders`, and its output: the provider's charge id.
async fn charge<DB: support::app::Store>(
    tx: &mut idem::Tx<'_, DB>,
    account: i64,
) -> Result<String, idem::phased::PhaseError> {
    let order: support::app::NewOrder =
        serde_json::from_str(r#"{"item":"charge","quantity":1,"amount_cents":100}"#).unwrap();
    DB::insert_order(tx, account, &order).await.expect("insert");
    Ok(CHARGE.to_owned())
}

/// A phased handler that records the provider's charge id, then answers 503 when asked
/// (`x-fail`, not part of the request's fingerprint), 201 with the charge id otherwise.
#[idem::idempotent(scope = account, lease = "1s")]
async fn phased_charge<DB: TestBackend>(
    account: support::app::Account,
    req: actix_web::HttpRequest,
    phases: idem::Phases<DB>,
) -> Result<actix_web::HttpResponse, idem::phased::PhaseError> {
    let charge = phases
        .run("charge", async |mut tx| {
            charge::<DB>(&mut tx, account.id()).await
        })
        .await?;
    if req.headers().contains_key("x-fail") {
        return Ok(actix_web::HttpResponse::ServiceUnavailable().finish());
    }
    Ok(actix_web::HttpResponse::Created().body(charge))
}

/// The recorded output of `key`'s only phase, as the column holds it.
async fn phase_output<DB: TestBackend>(env: &Env<DB>, key: &str) -> String {
    let outputs = DB::texts(
        &env.pool,
        &format!(
            "SELECT CAST(p.output AS TEXT) FROM idem_phases p \
             JOIN idem_keys k ON k.scope = p.scope AND k.idem_key = p.idem_key \
             WHERE k.idem_key = '{key}'"
        ),
    )
    .await;
    assert_eq!(outputs.len(), 1, "one recorded phase: {outputs:?}");
    outputs.into_iter().next().unwrap()
}

/// With a keyring, a phase's output (here a provider's charge id) is recorded sealed; a
/// retry that resumes gets it back in clear, without running the phase again. A sealed
/// output moved to another key's row, and one in clear, do not open: the retry is a 500
/// and the phase does not run again.
async fn phase_outputs_are_sealed_and_resume_in_clear<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let idem = env.idem().encrypt_with(first());
    let app = support::service_with_twin(
        &idem,
        |cfg| {
            cfg.route(
                "/test/phased-charge",
                actix_web::web::post().to(phased_charge::<DB>),
            );
        },
        || {
            let handler = by_database::<DB, _>(
                || axum::routing::post(on_postgres::phased_charge),
                || axum::routing::post(on_sqlite::phased_charge),
            );
            axum::Router::new().route("/test/phased-charge", handler)
        },
    )
    .await;
    let request = |key| support::post("/test/phased-charge", ALICE, key, "{}");
    for key in ["charge-a", "charge-b", "charge-c"] {
        let failed = app.call(request(key).insert_header(("x-fail", "1"))).await;
        assert_eq!(failed.status, 503, "{failed:?}");
    }
    let sealed = phase_output(&env, "charge-a").await;
    assert!(!sealed.contains(CHARGE), "the output is sealed: {sealed}");
    assert!(sealed.starts_with("\"\\u0000idem-sealed1:"), "{sealed}");
    assert_eq!(env.orders().await, 3, "each key's phase ran once");

    let resumed = app.call(request("charge-a")).await;
    assert_eq!(resumed.status, 201, "{resumed:?}");
    assert_eq!(&resumed.body[..], CHARGE.as_bytes(), "the output opened");
    assert_eq!(env.orders().await, 3, "the phase was not run again");

    // charge-a's sealed output in charge-b's row; charge-c's in clear.
    let literal = sealed.replace('\'', "''");
    DB::texts(
        &env.pool,
        &format!(
            "UPDATE idem_phases SET output = '{literal}' WHERE idem_key = 'charge-b' \
             RETURNING idem_key"
        ),
    )
    .await;
    DB::texts(
        &env.pool,
        &format!(
            "UPDATE idem_phases SET output = '\"{CHARGE}\"' WHERE idem_key = 'charge-c' \
             RETURNING idem_key"
        ),
    )
    .await;
    for key in ["charge-b", "charge-c"] {
        let refused = app.call(request(key)).await;
        assert_eq!(refused.status, 500, "{key}: {refused:?}");
        assert_ne!(&refused.body[..], CHARGE.as_bytes());
    }
    assert_eq!(env.orders().await, 3, "no phase ran again");
}

/// A phased handler that commits a step, then answers 503: its key stays in progress,
/// with its lease free, for an operator to resolve.
#[idem::idempotent(scope = account, lease = "1s")]
async fn phased_unfinished<DB: TestBackend>(
    account: support::app::Account,
    phases: idem::Phases<DB>,
) -> Result<actix_web::HttpResponse, idem::phased::PhaseError> {
    let _ = account;
    phases
        .run("step", async |_tx| Ok::<_, idem::phased::PhaseError>(1))
        .await?;
    Ok(actix_web::HttpResponse::ServiceUnavailable().finish())
}

/// An operator resolves unfinished keys of an encrypted deployment: with
/// `resolve_key_with` the answer is sealed and replays; `resolve_key`, which has no keyring,
/// refuses and stores nothing (in clear, the answer would be refused on every replay).
async fn an_operator_resolution_is_sealed_and_replays<DB: RowAccess>() {
    let env = Env::<DB>::open().await;
    let idem = env.idem().encrypt_with(first());
    let app = support::service_with_twin(
        &idem,
        |cfg| {
            cfg.route(
                "/test/phased-unfinished",
                actix_web::web::post().to(phased_unfinished::<DB>),
            );
        },
        || {
            let handler = by_database::<DB, _>(
                || axum::routing::post(on_postgres::phased_unfinished),
                || axum::routing::post(on_sqlite::phased_unfinished),
            );
            axum::Router::new().route("/test/phased-unfinished", handler)
        },
    )
    .await;
    let request = |key| support::post("/test/phased-unfinished", ALICE, key, "{}");
    for key in ["resolved-sealed", "resolved-clear"] {
        assert_eq!(app.call(request(key)).await.status, 503);
    }

    let answer = br#"{"state":"succeeded","card":"secret 4242"}"#;
    let resolution = idem::admin::Resolution::completed(201, "application/json", answer.to_vec());
    let keep = Duration::from_secs(3600);
    let scope = ALICE.to_string();
    idem::admin::resolve_key_with(&idem, &scope, "resolved-sealed", &resolution, keep)
        .await
        .expect("resolve");
    let (headers, body) = DB::response(&env.pool, "resolved-sealed").await;
    assert!(!contains(&body, b"secret 4242"), "the answer is sealed");
    assert!(
        contains(&headers, b"2026-05"),
        "by the keyring's current key"
    );
    let replay = app.call(request("resolved-sealed")).await;
    assert_eq!(replay.status, 201);
    assert!(replay.replayed());
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(&replay.body[..], answer);

    // Without the keyring the answer would be stored in clear and refused on replay:
    // resolve_key (what `idem resolve` calls) refuses instead, on a table holding sealed
    // responses, and stores nothing.
    let refused = idem::admin::resolve_key(
        env.idem().pool(),
        &scope,
        "resolved-clear",
        &resolution,
        keep,
    )
    .await;
    assert!(
        matches!(refused, Err(idem::admin::ResolveError::Sealed)),
        "{refused:?}"
    );
    // Still unfinished: the retry runs the handler again rather than a 500.
    assert_eq!(app.call(request("resolved-clear")).await.status, 503);
}

support::backend_tests!(
    a_response_stripped_of_its_seal_is_not_replayed,
    old_plaintext_rows_replay_only_during_the_migration_allowance,
    an_earlier_lifes_response_does_not_open_in_a_later_life,
    the_phased_form_stores_ciphertext_sealed_to_the_keys_life,
    an_operator_resolution_is_sealed_and_replays,
    phase_outputs_are_sealed_and_resume_in_clear,
);

support::both_frameworks!(
    #[actix_web::test]
    stored_responses_are_ciphertext_and_replay_as_plaintext,
    #[actix_web::test]
    after_a_rotation_old_rows_replay_and_new_rows_use_the_new_key,
    #[actix_web::test]
    a_tampered_row_gets_a_500_problem_not_garbage,
);
