//! The Structured Field string form of a key (`"abc"`, as the IETF draft writes it) and
//! the bare form (`abc`) are the same key, whichever comes first.

use crate::support;

use support::{ALICE, Env, order_json, post_order};

/// Sends `first` and then `second` as the key of the same order; the second must replay
/// the first, and the stored key must be `stored`.
async fn same_key(first: &str, second: &str, stored: &str) {
    let env = Env::new().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);

    let original = app.call(post_order(ALICE, first, &body)).await;
    original.assert_created();
    let again = app.call(post_order(ALICE, second, &body)).await;
    again.assert_replay_of(&original);

    assert_eq!(env.orders().await, 1, "{first} then {second}: one order");
    let rows = env.key_rows().await;
    assert_eq!(rows.len(), 1, "{first} then {second}: one key row");
    assert_eq!(rows[0].1, stored, "the key is stored without its quotes");
}

async fn quoted_then_bare_replays() {
    same_key("\"abc\"", "abc", "abc").await;
}

async fn bare_then_quoted_replays() {
    same_key("abc", "\"abc\"", "abc").await;
}

async fn escapes_in_the_quoted_form_denote_the_bare_characters() {
    same_key(r#""a\"b""#, r#"a"b"#, r#"a"b"#).await;
    same_key(r#"a\b"#, r#""a\\b""#, r#"a\b"#).await;
}

async fn the_quoted_form_is_not_another_bare_key() {
    // `"abc"` means abc, so it must not also be usable as a distinct key with quotes.
    let env = Env::new().await;
    let app = support::service(&env.idem()).await;
    let first = app
        .call(post_order(ALICE, "\"abc\"", &order_json("tea", 1, 100)))
        .await;
    first.assert_created();
    let other = app
        .call(post_order(ALICE, "abc", &order_json("tea", 2, 100)))
        .await;
    other.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(env.orders().await, 1);
}

support::both_frameworks!(
    #[actix_web::test]
    quoted_then_bare_replays,
    #[actix_web::test]
    bare_then_quoted_replays,
    #[actix_web::test]
    escapes_in_the_quoted_form_denote_the_bare_characters,
    #[actix_web::test]
    the_quoted_form_is_not_another_bare_key,
);
