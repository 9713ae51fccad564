//! Repeating a completed request replays the stored answer: the same status, body bytes
//! and `Location`, plus `Idempotent-Replayed: true`, and the handler does not run again.
//! Credentials (`Set-Cookie`) are never replayed; other headers only when allow-listed.

use crate::support;

use actix_web::http::header::{HeaderName, LOCATION};
use actix_web::{HttpResponse, post};
use support::app::Account;
use support::{ALICE, Env, TestBackend, order_json, post, post_order};

async fn a_repeat_replays_status_body_and_location_without_a_second_row<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 2, 1250);

    let first = app.call(post_order(ALICE, "replay-1", &body)).await;
    let id = first.assert_created();
    let order = first.json();
    assert_eq!(order["item"], "tea");
    assert_eq!(order["quantity"], 2);
    assert_eq!(order["amount_cents"], 1250);

    for _ in 0..3 {
        let again = app.call(post_order(ALICE, "replay-1", &body)).await;
        again.assert_replay_of(&first);
        assert_eq!(again.status, 201);
        assert_eq!(
            again.header("location"),
            Some(format!("/orders/{id}").as_str())
        );
        assert_eq!(again.header("content-type"), Some("application/json"));
    }

    assert_eq!(env.orders().await, 1, "replays add no order");
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "replay-1".to_owned(),
            "completed".to_owned(),
            Some(201)
        )]
    );
    assert_eq!(
        DB::retentions(&env.pool).await,
        [24 * 3600],
        "retention = \"24h\" keeps the key for 24 hours"
    );

    // The order the replay points at is the one that was created.
    let fetched = app
        .call(support::get(&format!("/orders/{id}"), ALICE))
        .await;
    assert_eq!(fetched.status, 200);
    assert_eq!(
        fetched.body, first.body,
        "GET shows the order the POST returned"
    );
}

async fn a_new_key_creates_a_new_order<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);

    let first = app.call(post_order(ALICE, "key-a", &body)).await;
    let second = app.call(post_order(ALICE, "key-b", &body)).await;
    assert_ne!(first.assert_created(), second.assert_created());
    assert_eq!(env.orders().await, 2);
}

/// Answers with a cookie, a custom header and a Location, so the test sees which of them
/// the replay carries.
#[post("/test/cookie")]
#[idem::idempotent(scope = account, retention = "24h")]
async fn with_cookie(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES ($1, 'cookie', 1, 0) RETURNING id",
    )
    .bind(account.id())
    .fetch_one(&mut *tx)
    .await
    .expect("insert");
    HttpResponse::Created()
        .insert_header(("set-cookie", "session=secret; HttpOnly"))
        .insert_header(("x-order-tag", format!("tag-{id}")))
        .insert_header((LOCATION, format!("/orders/{id}")))
        .body(format!("order {id}"))
}

/// The same handler on axum.
#[idem::axum::idempotent(scope = account, retention = "24h")]
async fn with_cookie_on_axum(
    account: Account,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;

    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES ($1, 'cookie', 1, 0) RETURNING id",
    )
    .bind(account.id())
    .fetch_one(&mut *tx)
    .await
    .expect("insert");
    let headers = [
        (header::SET_COOKIE, "session=secret; HttpOnly".to_owned()),
        (
            header::HeaderName::from_static("x-order-tag"),
            format!("tag-{id}"),
        ),
        (header::LOCATION, format!("/orders/{id}")),
    ];
    (StatusCode::CREATED, headers, format!("order {id}")).into_response()
}

/// The example's application with `/test/cookie` on the test's framework.
async fn cookie_app(idem: &idem::Idem<sqlx::Postgres>) -> support::TestApp {
    support::service_with_twin(
        idem,
        |cfg| {
            cfg.service(with_cookie);
        },
        || axum::Router::new().route("/test/cookie", axum::routing::post(with_cookie_on_axum)),
    )
    .await
}

async fn set_cookie_is_never_replayed_and_custom_headers_only_when_allowed() {
    let env = Env::new().await;
    let app = cookie_app(&env.idem()).await;

    let first = app
        .call(post("/test/cookie", ALICE, "cookie-1", "{}"))
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("set-cookie"), Some("session=secret; HttpOnly"));
    let tag = first
        .header("x-order-tag")
        .expect("original has x-order-tag")
        .to_owned();

    let again = app
        .call(post("/test/cookie", ALICE, "cookie-1", "{}"))
        .await;
    again.assert_replay_of(&first);
    assert_eq!(
        again.header("set-cookie"),
        None,
        "Set-Cookie must never be replayed"
    );
    assert_eq!(
        again.header("x-order-tag"),
        None,
        "headers off the allow-list are not replayed"
    );
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(env.orders().await, 1);

    // With the header allow-listed, it is stored and replayed; Set-Cookie still is not.
    let idem = env
        .idem()
        .replay_header(HeaderName::from_static("x-order-tag"));
    let app = cookie_app(&idem).await;
    let first = app
        .call(post("/test/cookie", ALICE, "cookie-2", "{}"))
        .await;
    assert_eq!(first.status, 201);
    assert_ne!(
        first.header("x-order-tag"),
        Some(tag.as_str()),
        "a new key runs the handler"
    );
    let again = app
        .call(post("/test/cookie", ALICE, "cookie-2", "{}"))
        .await;
    again.assert_replay_of(&first);
    assert_eq!(again.header("x-order-tag"), first.header("x-order-tag"));
    assert_eq!(again.header("set-cookie"), None);
    assert_eq!(env.orders().await, 2);
}

support::backend_tests!(
    a_repeat_replays_status_body_and_location_without_a_second_row,
    a_new_key_creates_a_new_order,
);

support::both_frameworks!(
    #[actix_web::test]
    set_cookie_is_never_replayed_and_custom_headers_only_when_allowed,
);
