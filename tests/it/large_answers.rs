//! Answers larger than 64 KiB, which the PostgreSQL store sends with `COPY .. FROM STDIN`
//! rather than as a bound parameter (`store/postgres/staged.rs`): stored and replayed
//! byte for byte whatever bytes they hold, on both forms, sealed when encryption is on,
//! and nothing is left in the staging table afterwards, nor after a completion that is
//! rolled back. Bodies on either side of the threshold take the two paths. On both
//! frameworks, PostgreSQL only: the threshold and the staging table are its store's.

use crate::large_support;
use crate::support;

use idem::encryption::Keyring;
use large_support::{answer, app};
use support::{ALICE, Env, post};

async fn staged_rows(env: &Env) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM idem_staged_bodies")
        .fetch_one(&env.pool)
        .await
        .expect("the staging table")
}

async fn stored_body(env: &Env, key: &str) -> Vec<u8> {
    sqlx::query_scalar("SELECT response_body FROM idem_keys WHERE idem_key = $1")
        .bind(key)
        .fetch_one(&env.pool)
        .await
        .expect("the key row")
}

const SIZES: [usize; 4] = [64 * 1024, 64 * 1024 + 1, 300_001, 1 << 20];

async fn large_answers_are_stored_and_replayed_byte_for_byte() {
    let env = Env::new().await;
    let app = app(&env.idem(), false).await;
    for form in ["single", "phased"] {
        for size in SIZES {
            let path = format!("/test/{form}/{size}");
            let key = format!("{form}-{size}");
            let first = app.call(post(&path, ALICE, &key, "{}")).await;
            assert_eq!(first.status, 200, "{path}");
            assert_eq!(first.body, answer(size), "{path}: the handler's answer");
            assert_eq!(stored_body(&env, &key).await, answer(size), "{path}");
            let replay = app.call(post(&path, ALICE, &key, "{}")).await;
            assert!(replay.replayed(), "{path}");
            assert_eq!(replay.body, first.body, "{path}: byte for byte");
            assert_eq!(staged_rows(&env).await, 0, "{path}: nothing left staged");
        }
    }
}

async fn large_sealed_answers_are_ciphertext_and_replay() {
    let env = Env::new().await;
    let keyring = Keyring::new("2026-12", [0x33; 32]);
    let app = app(&env.idem().encrypt_with(keyring), false).await;
    for form in ["single", "phased"] {
        // Above the threshold; sealing a megabyte takes long in a debug build.
        let size = 200_000;
        let path = format!("/test/{form}/{size}");
        let key = format!("sealed-{form}");
        let first = app.call(post(&path, ALICE, &key, "{}")).await;
        assert_eq!(first.body, answer(size), "{path}");
        let stored = stored_body(&env, &key).await;
        assert!(
            stored.len() > size,
            "{path}: sealed, so longer than the answer"
        );
        assert!(
            !stored.windows(1000).any(|w| w == &answer(1000)[..]),
            "{path}: not in clear"
        );
        let replay = app.call(post(&path, ALICE, &key, "{}")).await;
        assert!(replay.replayed(), "{path}");
        assert_eq!(replay.body, first.body, "{path}: opened byte for byte");
    }
    assert_eq!(staged_rows(&env).await, 0);
}

async fn a_rolled_back_completion_leaves_nothing_staged() {
    let env = Env::new().await;
    sqlx::raw_sql(
        "CREATE TABLE parents (id bigint PRIMARY KEY);
         CREATE TABLE children (parent_id bigint NOT NULL
             REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
    )
    .execute(&env.pool)
    .await
    .expect("create the tables");
    let app = app(&env.idem(), true).await;
    let path = format!("/test/unfinishable/{}", 1 << 20);
    let failed = app.call(post(&path, ALICE, "doomed", "{}")).await;
    failed.assert_idem_problem(503, "storage-unavailable");
    assert_eq!(env.keys().await, 0, "the key was not recorded");
    assert_eq!(staged_rows(&env).await, 0, "nor was the staged body");
}

support::both_frameworks!(
    #[actix_web::test]
    large_answers_are_stored_and_replayed_byte_for_byte,
    #[actix_web::test]
    large_sealed_answers_are_ciphertext_and_replay,
    #[actix_web::test]
    a_rolled_back_completion_leaves_nothing_staged,
);
