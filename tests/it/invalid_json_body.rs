//! A body sent with a JSON content type that is not JSON (invalid UTF-8, plain text,
//! a lone surrogate escape, nesting past 127 levels) is a 400 before anything is stored,
//! whether the handler parses JSON itself or idem is the first to read it, and the key
//! stays unused.

use crate::support;

use actix_web::{HttpResponse, web};
use support::TestRequest;
use support::app::{Account, NewOrder, Store};
use support::{ALICE, Env, TestBackend, by_database, order_json, post_order};

/// The order `note` records.
fn a_note() -> NewOrder {
    NewOrder {
        item: "note".to_owned(),
        quantity: 1,
        amount_cents: 0,
    }
}

/// Records that it ran; reads no body, so only idem's fingerprint looks at it.
#[idem::idempotent(scope = account, retention = "24h")]
async fn note<DB: Store>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let order = DB::insert_order(&mut tx, account.id(), &a_note())
        .await
        .expect("insert");
    HttpResponse::Created().body(order.id.to_string())
}

/// `note` on axum, once per database.
macro_rules! axum_note {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::{Account, Store, a_note};

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn note(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> (axum::http::StatusCode, String) {
                let order = <$db as Store>::insert_order(&mut tx, account.id(), &a_note())
                    .await
                    .expect("insert");
                (axum::http::StatusCode::CREATED, order.id.to_string())
            }
        }
    };
}

axum_note!(on_postgres, sqlx::Postgres);
axum_note!(on_sqlite, sqlx::Sqlite);

/// The example's application plus `POST /test/note`, on the test's framework.
async fn note_app<DB: TestBackend>(env: &Env<DB>) -> support::TestApp {
    support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/test/note", web::post().to(note::<DB>));
        },
        || {
            let note = by_database::<DB, _>(
                || axum::routing::post(on_postgres::note),
                || axum::routing::post(on_sqlite::note),
            );
            axum::Router::new().route("/test/note", note)
        },
    )
    .await
}

/// `POST uri` with a key made of `what` (spaces become dashes).
fn post_bytes(uri: &str, what: &str, content_type: &str, body: &[u8]) -> TestRequest {
    let key = what.replace(' ', "-");
    TestRequest::post()
        .uri(uri)
        .insert_header(("x-account-id", ALICE.to_string()))
        .insert_header(("idempotency-key", key))
        .insert_header(("content-type", content_type))
        .set_payload(body.to_vec())
}

/// Not JSON, each in its own way.
const NOT_JSON: [(&str, &[u8]); 5] = [
    (
        "invalid UTF-8 in a string",
        b"{\"item\":\"\xff\xfe\",\"quantity\":1,\"amount_cents\":1}",
    ),
    ("invalid UTF-8 alone", b"\xc3\x28\xa0\xa1"),
    ("plain text", b"hello, world"),
    (
        "a lone surrogate escape",
        br#"{"item":"\ud800","quantity":1,"amount_cents":1}"#,
    ),
    (
        "a truncated document",
        br#"{"item":"tea","quantity":1,"amount_cents":"#,
    ),
];

async fn a_json_body_that_is_not_json_is_400_where_the_handler_parses_it<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    for (what, body) in NOT_JSON {
        app.call(post_bytes("/orders", what, "application/json", body))
            .await
            .assert_app_problem(400, "malformed-body");
    }
    assert_eq!((env.keys().await, env.orders().await), (0, 0));
    // The keys were not consumed: a valid order with one of them is created.
    let key = NOT_JSON[0].0.replace(' ', "-");
    app.call(post_order(ALICE, &key, &order_json("tea", 1, 1)))
        .await
        .assert_created();
}

async fn a_json_body_that_is_not_json_is_400_where_only_idem_reads_it<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = note_app(&env).await;
    for content_type in [
        "application/json",
        "application/vnd.api+json; charset=utf-8",
    ] {
        for (what, body) in NOT_JSON {
            let problem = app
                .call(post_bytes("/test/note", what, content_type, body))
                .await
                .assert_idem_problem(400, "request-body-invalid");
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("not valid JSON")),
                "{what}: {problem}"
            );
        }
    }
    assert_eq!((env.keys().await, env.orders().await), (0, 0));

    // The same bytes without a JSON content type are plain data, and the key is free.
    let reply = app
        .call(post_bytes(
            "/test/note",
            NOT_JSON[1].0,
            "application/octet-stream",
            NOT_JSON[1].1,
        ))
        .await;
    assert_eq!(reply.status, 201);
    assert_eq!((env.keys().await, env.orders().await), (1, 1));
}

async fn json_nested_past_the_parser_limit_is_400_not_a_crash<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = note_app(&env).await;
    // serde_json refuses a 128th level of nesting, and so 100 000 levels.
    for depth in [128, 100_000] {
        let deep = "[".repeat(depth) + &"]".repeat(depth);
        app.call(post_bytes(
            "/test/note",
            "deep",
            "application/json",
            deep.as_bytes(),
        ))
        .await
        .assert_idem_problem(400, "request-body-invalid");
        // The example's order extractor gives up at the first level already (an array
        // is no order): refused before the claim either way.
        let reply = app
            .call(post_bytes(
                "/orders",
                "deep",
                "application/json",
                deep.as_bytes(),
            ))
            .await;
        assert!([400, 422].contains(&reply.status), "{}", reply.status);
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!((env.keys().await, env.orders().await), (0, 0));
    // 127 levels are a JSON document like any other.
    let ok = "[".repeat(127) + &"]".repeat(127);
    let reply = app
        .call(post_bytes(
            "/test/note",
            "deep",
            "application/json",
            ok.as_bytes(),
        ))
        .await;
    assert_eq!(reply.status, 201);
}

support::backend_tests!(
    a_json_body_that_is_not_json_is_400_where_the_handler_parses_it,
    a_json_body_that_is_not_json_is_400_where_only_idem_reads_it,
    json_nested_past_the_parser_limit_is_400_not_a_crash,
);
