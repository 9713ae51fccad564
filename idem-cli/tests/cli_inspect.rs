//! `idem inspect <scope> <key>` shows one key: state, recovery point, fingerprint,
//! request, times, and the stored status, headers and body.

mod support;

use support::{idem_on, migrated};

#[tokio::test]
async fn inspect_shows_a_completed_key_and_its_stored_response() {
    let (db, pool) = migrated().await;
    let body = format!("{{\"id\":7,\"note\":\"{}\"}}", "x".repeat(300));
    sqlx::query(
        "INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state,
                                response_status, response_headers, response_body,
                                created_at, expires_at)
         VALUES ('1001', 'order-7', decode(repeat('ab', 32), 'hex'), 'POST', '/orders?x=1',
                 'completed', 201,
                 convert_to(E'location: /orders/7\\r\\ncontent-type: application/json\\r\\n', 'UTF8'),
                 convert_to($1, 'UTF8'), now() - interval '2 hours',
                 now() + interval '22 hours')",
    )
    .bind(&body)
    .execute(&pool)
    .await
    .expect("insert the key");

    let out = idem_on(&db, &["inspect", "1001", "order-7"]).success();
    let field = |label: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("a line {label}:\n{out}"))[16..]
            .to_owned()
    };
    assert_eq!(field("scope"), "\"1001\"");
    assert_eq!(field("key "), "\"order-7\"");
    assert_eq!(field("state"), "completed");
    assert_eq!(field("recovery point"), "started");
    assert_eq!(field("fingerprint"), "ab".repeat(32));
    assert_eq!(field("request"), "POST /orders?x=1");
    assert!(field("created").ends_with("(2h 0m ago)"), "{out}");
    assert!(field("expires").contains("(in 21h 59m)"), "{out}");
    assert_eq!(field("locked until"), "-");
    assert_eq!(field("status"), "201");
    assert_eq!(field("headers"), "location: /orders/7");
    assert!(
        out.contains("\n                content-type: application/json\n"),
        "{out}"
    );
    let shown = field("body");
    assert!(
        shown.starts_with(&format!("{} bytes: {{\"id\":7,\"note\":\"xxx", body.len())),
        "{out}"
    );
    assert!(shown.ends_with("…"), "a long body is cut: {out}");
    assert!(shown.len() < 200, "a short preview: {out}");

    // The quoted Structured Field form names the same key.
    let quoted = idem_on(&db, &["inspect", "1001", "\"order-7\""]).success();
    assert_eq!(quoted, out);
}

#[tokio::test]
async fn inspect_shows_a_key_in_progress() {
    let (db, pool) = migrated().await;
    support::insert_in_progress(&pool, "acct", "pay-1", 60, 300).await;
    let out = idem_on(&db, &["inspect", "acct", "pay-1"]).success();
    assert!(out.contains("state           started\n"), "{out}");
    assert!(out.contains("recovery point  charged\n"), "{out}");
    assert!(out.contains("status          -\n"), "{out}");
    assert!(out.contains("body            -\n"), "{out}");
    assert!(
        !out.contains("locked until    -"),
        "the lease is shown: {out}"
    );
}

#[tokio::test]
async fn an_unknown_key_is_a_one_line_error() {
    let (db, _pool) = migrated().await;
    let message = idem_on(&db, &["inspect", "1001", "nope"]).one_line_error();
    assert_eq!(message, "no key \"nope\" in scope \"1001\"");
}
