//! Keys are scoped by caller: the same key from two accounts is two independent requests
//! that never replay, block or reveal each other, and keys and scopes full of SQL and
//! LIKE metacharacters are plain data.

mod support;

use std::borrow::Cow;
use std::future::{Ready, ready};
use std::time::Duration;

use actix_web::{FromRequest, HttpRequest, HttpResponse, dev, post};
use support::held::{self, Gate};
use support::{ALICE, BOB, Env, order_json, post, post_order};

async fn the_same_key_from_another_account_runs_independently() {
    let env = Env::new().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 300);

    let alice = app.call(post_order(ALICE, "shared-key", &body)).await;
    let alice_id = alice.assert_created();
    let bob = app.call(post_order(BOB, "shared-key", &body)).await;
    let bob_id = bob.assert_created();
    assert_ne!(
        alice_id, bob_id,
        "Bob got his own order, not a replay of Alice's"
    );
    assert_ne!(alice.body, bob.body);
    assert_eq!(env.orders_of(ALICE).await, 1);
    assert_eq!(env.orders_of(BOB).await, 1);

    // Each account's retry replays its own answer.
    app.call(post_order(ALICE, "shared-key", &body))
        .await
        .assert_replay_of(&alice);
    app.call(post_order(BOB, "shared-key", &body))
        .await
        .assert_replay_of(&bob);

    // A different body under Bob's scope mismatches Bob's request only.
    let other = app
        .call(post_order(BOB, "shared-key", &order_json("tea", 9, 300)))
        .await;
    other.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(env.orders().await, 2);

    // Reads are scoped too: Bob cannot see Alice's order.
    let peek = app
        .call(support::get(&format!("/orders/{alice_id}"), BOB))
        .await;
    peek.assert_app_problem(404, "order-not-found");
    let list = app.call(support::get("/orders", BOB)).await;
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["id"], bob_id);
}

async fn an_in_flight_key_does_not_block_another_account() {
    let env = Env::new().await;
    let gate = actix_web::web::Data::new(Gate::default());
    // A short claim wait: had Bob's claim queued behind Alice's row, he would get a 409.
    // (PostgreSQL: on SQLite the one write lock is Alice's, see `other_callers.rs`.)
    let idem = env.idem().claim_wait(Duration::from_millis(200));
    let app = held::app(&idem, &gate).await;
    let body = order_json("tea", 1, 300);

    let alice = app.call(post("/test/held", ALICE, "busy-key", &body));
    let bob = async {
        gate.reached().await;
        let bob = app.call(post_order(BOB, "busy-key", &body)).await;
        // Bob was answered while Alice's request held the key.
        gate.open();
        bob
    };
    let (alice, bob) = futures_util::future::join(alice, bob).await;

    bob.assert_created();
    assert_eq!(alice.status, 201);
    assert_eq!(env.orders_of(ALICE).await, 1);
    assert_eq!(env.orders_of(BOB).await, 1);
}

async fn keys_with_metacharacters_are_plain_data() {
    let env = Env::new().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 300);
    // `%` and `_` would match other keys under LIKE; quotes, backslashes and semicolons
    // would break string-built SQL. Bare keys may hold all of them.
    let keys = [
        "plain",
        "%",
        "_",
        "pl%",
        "pl_in",
        "'",
        "''",
        "a'b",
        "a\"b",
        "\\",
        "a\\b",
        "a\\'b",
        "';DROP_TABLE_orders;--",
        "$1",
        "%s",
        "%00",
        "\\x00",
        "E'\\\\'",
        "*",
    ];

    let mut firsts = Vec::new();
    for key in keys {
        let reply = app.call(post_order(ALICE, key, &body)).await;
        reply.assert_created();
        firsts.push(reply);
    }
    assert_eq!(
        env.orders().await,
        keys.len() as i64,
        "every key ran the handler once"
    );
    for (key, first) in keys.iter().zip(&firsts) {
        app.call(post_order(ALICE, key, &body))
            .await
            .assert_replay_of(first);
    }
    assert_eq!(env.orders().await, keys.len() as i64);

    let mut stored: Vec<String> = env.key_rows().await.into_iter().map(|row| row.1).collect();
    let mut expected: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    stored.sort();
    expected.sort();
    assert_eq!(stored, expected, "keys are stored exactly as sent");
}

/// A caller named by free text (`X-Tenant`), to try scope values no account id can hold.
struct Tenant(String);

impl FromRequest for Tenant {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut dev::Payload) -> Self::Future {
        ready(
            req.headers()
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .map(|v| Tenant(v.to_owned()))
                .ok_or_else(|| actix_web::error::ErrorUnauthorized("no tenant")),
        )
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Tenant {
    type Rejection = (axum::http::StatusCode, &'static str);

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(|v| Tenant(v.to_owned()))
            .ok_or((axum::http::StatusCode::UNAUTHORIZED, "no tenant"))
    }
}

impl idem::ScopeKey for Tenant {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.0)
    }
}

#[post("/test/tenant")]
#[idem::idempotent(scope = tenant, retention = "24h")]
async fn tenant_order(tenant: Tenant, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES (0, $1, 1, 0) RETURNING id",
    )
    .bind(&tenant.0)
    .fetch_one(&mut *tx)
    .await
    .expect("insert");
    HttpResponse::Created().body(format!("{id}"))
}

/// `tenant_order` on axum.
#[idem::axum::idempotent(scope = tenant, retention = "24h")]
async fn tenant_order_on_axum(
    tenant: Tenant,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> (axum::http::StatusCode, String) {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES (0, $1, 1, 0) RETURNING id",
    )
    .bind(&tenant.0)
    .fetch_one(&mut *tx)
    .await
    .expect("insert");
    (axum::http::StatusCode::CREATED, format!("{id}"))
}

async fn scopes_with_metacharacters_are_plain_data() {
    let env = Env::new().await;
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.service(tenant_order);
        },
        || axum::Router::new().route("/test/tenant", axum::routing::post(tenant_order_on_axum)),
    )
    .await;
    let tenants = [
        "acme",
        "%",
        "_",
        "ac%",
        "a_me",
        "'",
        "a'b",
        "a\"b",
        "\\",
        "a\\b",
        "x' OR '1'='1",
        "a; DROP TABLE idem_keys; --",
        "$1",
        " spaced ",
        "webhook:provider",
        "\\webhook:provider",
    ];

    let mut firsts = Vec::new();
    for tenant in tenants {
        let req = post("/test/tenant", ALICE, "one-key", "{}").insert_header(("x-tenant", tenant));
        let reply = app.call(req).await;
        assert_eq!(reply.status, 201, "tenant {tenant:?}");
        assert!(!reply.replayed(), "tenant {tenant:?} ran its own request");
        firsts.push(reply);
    }
    for (tenant, first) in tenants.iter().zip(&firsts) {
        let req = post("/test/tenant", ALICE, "one-key", "{}").insert_header(("x-tenant", *tenant));
        app.call(req).await.assert_replay_of(first);
    }

    let items: Vec<String> = sqlx::query_scalar("SELECT item FROM orders")
        .fetch_all(&env.pool)
        .await
        .expect("read back");
    let scopes: Vec<String> = sqlx::query_scalar("SELECT scope FROM idem_keys")
        .fetch_all(&env.pool)
        .await
        .expect("read back");
    let sorted = |mut values: Vec<String>| {
        values.sort();
        values
    };
    let sent: Vec<String> = tenants.iter().map(|t| (*t).to_owned()).collect();
    assert_eq!(
        sorted(items),
        sorted(sent.clone()),
        "one order per tenant, as sent"
    );
    // Stored as sent, except that a value beginning like a signed sender's namespace
    // (`webhook:`) or like an escaped value (`\`) gets a `\` in front.
    let escaped = sent
        .iter()
        .map(|t| {
            if t.starts_with("webhook:") || t.starts_with('\\') {
                format!("\\{t}")
            } else {
                t.clone()
            }
        })
        .collect();
    assert_eq!(
        sorted(scopes),
        sorted(escaped),
        "one key per tenant, as stored"
    );
}

support::both_frameworks!(
    #[actix_web::test]
    the_same_key_from_another_account_runs_independently,
    #[actix_web::test]
    an_in_flight_key_does_not_block_another_account,
    #[actix_web::test]
    keys_with_metacharacters_are_plain_data,
    #[actix_web::test]
    scopes_with_metacharacters_are_plain_data,
);
