//! `idem stranded` lists keys in progress past their retention with what they committed,
//! and `idem resolve` ends one with the answer its retries get.

mod support;

use support::{idem_on, insert_in_progress, migrated};

/// A stranded key with two committed phases, as a crashed payment leaves it.
async fn stranded_payment(pool: &sqlx::PgPool, key: &str) {
    insert_in_progress(pool, "1001", key, 2 * 86_400, -60).await;
    sqlx::query(
        "INSERT INTO idem_phases (scope, idem_key, phase, output, fencing_token, recorded_at)
         VALUES ('1001', $1, 'payment_created', '{\"id\":7}', 0, now() - interval '50 hours'),
                ('1001', $1, 'charged', '{\"charge\":\"ch_1\"}', 0, now() - interval '49 hours')",
    )
    .bind(key)
    .execute(pool)
    .await
    .expect("insert the phases");
}

#[tokio::test]
async fn stranded_shows_each_key_with_its_phases_and_derived_keys() {
    let (db, pool) = migrated().await;
    let empty = idem_on(&db, &["stranded"]).success();
    assert_eq!(empty, "no stranded keys\n");

    stranded_payment(&pool, "pay-1").await;
    // In a lease: being worked on, not stranded.
    insert_in_progress(&pool, "1001", "busy", 60, 300).await;
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM idem_keys WHERE idem_key = 'pay-1'")
            .fetch_one(&pool)
            .await
            .expect("generation");

    let out = idem_on(&db, &["stranded", "--step", "charge"]).success();
    assert!(out.starts_with("scope \"1001\" key \"pay-1\"\n"), "{out}");
    assert!(!out.contains("busy"), "{out}");
    assert!(out.contains("  request         POST /payments\n"), "{out}");
    assert!(out.contains("  recovery point  charged\n"), "{out}");
    assert!(
        out.contains(&format!("  generation      {generation}\n")),
        "{out}"
    );
    let phases: Vec<&str> = out.lines().filter(|l| l.starts_with("  phase ")).collect();
    assert_eq!(phases.len(), 2, "{out}");
    assert!(
        phases[0].starts_with("  phase \"payment_created\" at "),
        "{out}"
    );
    assert!(phases[1].ends_with(": {\"charge\":\"ch_1\"}"), "{out}");
    let derived: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  derived key "))
        .collect();
    assert_eq!(derived.len(), 3, "each phase's name and --step: {out}");
    assert!(
        derived[2].starts_with("  derived key \"charge\": "),
        "{out}"
    );
    assert_eq!(derived[2].len(), "  derived key \"charge\": ".len() + 36);

    let stats = idem_on(&db, &["stats"]).success();
    assert!(
        stats.contains("stranded            1 (in progress past retention"),
        "{stats}"
    );
    assert!(
        stats.contains("oldest stranded     scope \"1001\" key \"pay-1\""),
        "{stats}"
    );
}

#[tokio::test]
async fn resolve_completes_a_stranded_key_with_an_answer_or_a_failure() {
    let (db, pool) = migrated().await;
    stranded_payment(&pool, "pay-ok").await;
    stranded_payment(&pool, "pay-bad").await;
    let body = std::env::temp_dir().join(format!("idem-resolve-{}.json", std::process::id()));
    std::fs::write(&body, br#"{"state":"succeeded"}"#).expect("write the body");

    let out = idem_on(
        &db,
        &[
            "resolve",
            "1001",
            "pay-ok",
            "--status",
            "201",
            "--content-type",
            "application/json",
            "--body-file",
            body.to_str().expect("UTF-8 path"),
            "--keep",
            "7d",
        ],
    )
    .success();
    assert!(
        out.starts_with("resolved key \"pay-ok\" in scope \"1001\""),
        "{out}"
    );
    let row: (String, Option<i16>, Vec<u8>, Vec<u8>, f64) = sqlx::query_as(
        "SELECT state, response_status, response_headers, response_body,
                extract(epoch FROM expires_at - now())::float8
           FROM idem_keys WHERE idem_key = 'pay-ok'",
    )
    .fetch_one(&pool)
    .await
    .expect("the resolved row");
    assert_eq!(row.0, "completed");
    assert_eq!(row.1, Some(201));
    assert_eq!(row.2, b"content-type: application/json\r\n");
    assert_eq!(row.3, br#"{"state":"succeeded"}"#);
    assert!(row.4 > 6.9 * 86_400.0, "kept for --keep: {}", row.4);

    idem_on(&db, &["resolve", "1001", "pay-bad", "--failed", "refunded"]).success();
    let (status, problem): (Option<i16>, Vec<u8>) = sqlx::query_as(
        "SELECT response_status, response_body FROM idem_keys WHERE idem_key = 'pay-bad'",
    )
    .fetch_one(&pool)
    .await
    .expect("the failed row");
    assert_eq!(status, Some(500));
    let problem: serde_json::Value = serde_json::from_slice(&problem).expect("problem JSON");
    assert_eq!(problem["detail"], "refunded");
    assert!(
        problem["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("#operation-failed"))
    );

    // Resolved keys are not stranded any more, and cannot be resolved twice.
    assert_eq!(idem_on(&db, &["stranded"]).success(), "no stranded keys\n");
    let again = idem_on(&db, &["resolve", "1001", "pay-ok", "--failed", "x"]).one_line_error();
    assert_eq!(
        again,
        "key \"pay-ok\" in scope \"1001\": the key is completed already"
    );
    let missing = idem_on(&db, &["resolve", "1001", "nope", "--failed", "x"]).one_line_error();
    assert_eq!(missing, "key \"nope\" in scope \"1001\": no such key");
    let _ = std::fs::remove_file(&body);
}

#[tokio::test]
async fn resolve_refuses_a_key_in_a_lease_and_needs_an_answer() {
    let (db, pool) = migrated().await;
    insert_in_progress(&pool, "1001", "busy", 60, 300).await;
    let busy = idem_on(&db, &["resolve", "1001", "busy", "--failed", "x"]).one_line_error();
    assert!(busy.contains("an attempt holds the key's lease"), "{busy}");

    // Neither --failed nor --status: a usage error before connecting.
    let usage = idem_on(&db, &["resolve", "1001", "busy"]);
    assert_eq!(usage.0.status.code(), Some(2), "{}", usage.stderr());
    // --status without its body.
    let usage = idem_on(&db, &["resolve", "1001", "busy", "--status", "201"]);
    assert_eq!(usage.0.status.code(), Some(2), "{}", usage.stderr());
}

/// A table that holds sealed responses (an application with a keyring) must not get an
/// answer in clear from the CLI, which has no keyring: the application would refuse that
/// answer with 500 `stored-response-unreadable` while the CLI said its retries get it.
#[tokio::test]
async fn resolve_refuses_to_store_in_clear_beside_sealed_responses() {
    let (db, pool) = migrated().await;
    stranded_payment(&pool, "pay-sealed").await;
    insert_in_progress(&pool, "1001", "done", 60, -60).await;
    // A completed row as a keyring writes it: the documented marker 0xFF "idem1", then
    // the key id, nonce and ciphertext (their bytes do not matter to the check).
    sqlx::query(
        "UPDATE idem_keys SET state = 'completed', response_status = 201,
             response_body = '\\xff6964656d31026b31'::bytea || sha256('nonce and ciphertext')
         WHERE idem_key = 'done'",
    )
    .execute(&pool)
    .await
    .expect("seal a completed row");

    let refused =
        idem_on(&db, &["resolve", "1001", "pay-sealed", "--failed", "x"]).one_line_error();
    assert!(
        refused.starts_with("key \"pay-sealed\" in scope \"1001\": the table holds sealed"),
        "{refused}"
    );
    let state: String =
        sqlx::query_scalar("SELECT state FROM idem_keys WHERE idem_key = 'pay-sealed'")
            .fetch_one(&pool)
            .await
            .expect("the key row");
    assert_eq!(state, "started", "nothing was stored");
}
