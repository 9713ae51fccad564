//! The `openapi` feature: `idem::openapi::IdempotencyDocs` documents every idempotent
//! operation of a utoipa document (the key header, the retention policy, the replay
//! header and idem's problem responses) and leaves other operations alone. The example's
//! document says what its server answers, and its server answers an undeclared method with
//! 405 and `Allow`.

#[path = "../examples/orders/openapi.rs"]
mod example_openapi;
mod support;

use actix_web::{HttpResponse, post, web};
use idem::openapi::IdempotencyDocs;
use serde_json::{Value, json};
use support::TestRequest;
use support::{ALICE, APP_PROBLEM, TestBackend, backend_tests};
use utoipa::OpenApi;

/// Route visible to `#[idempotent]` (written above `#[post]`); the handler documents a 422
/// of its own.
#[utoipa::path(
    post,
    path = "/accounts/{account}/widgets",
    responses(
        (status = 201, description = "The widget was created"),
        (status = 422, description = "The widget is not valid"),
        (status = 503, description = "Try again later"),
    )
)]
#[idem::idempotent(scope = account, retention = "36h")]
#[post("/accounts/{account:\\d+}/widgets")]
async fn create_widget(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

/// Route hidden from `#[idempotent]` (written below `#[post]`), under a scope prefix in the
/// document: matched by its operationId.
#[utoipa::path(post, path = "/v1/accounts/{account}/refunds", responses((status = 202, description = "Accepted")))]
#[post("/accounts/{account}/refunds")]
#[idem::idempotent(scope = account, retention = "7d")]
async fn create_refund(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Accepted().finish()
}

/// Not idempotent.
#[utoipa::path(post, path = "/ping", responses((status = 200, description = "Pong")))]
#[post("/ping")]
async fn ping() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[derive(OpenApi)]
#[openapi(
    paths(create_widget, create_refund, ping),
    modifiers(&IdempotencyDocs)
)]
struct ApiDoc;

fn document() -> Value {
    let text = ApiDoc::openapi()
        .to_json()
        .expect("the document serializes");
    serde_json::from_str(&text).expect("JSON")
}

fn key_header(operation: &Value) -> &Value {
    let params = operation["parameters"].as_array().expect("parameters");
    let keys: Vec<_> = params
        .iter()
        .filter(|p| p["name"] == "Idempotency-Key")
        .collect();
    assert_eq!(keys.len(), 1, "one key header: {params:?}");
    keys[0]
}

#[test]
fn idempotent_operations_document_the_key_its_retention_and_the_problems() {
    let doc = document();
    let op = &doc["paths"]["/accounts/{account}/widgets"]["post"];

    let key = key_header(op);
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], true);
    assert_eq!(key["schema"]["type"], "string");
    assert_eq!(key["schema"]["minLength"], 1);
    assert_eq!(key["schema"]["maxLength"], 2 + 2 * 255);
    let described = key["description"].as_str().unwrap();
    assert!(described.contains("36 hours"), "{described}");

    // The published policy, expiry included.
    assert_eq!(
        op["x-idempotency"],
        json!({
            "header": "Idempotency-Key",
            "required": true,
            "scope": "account",
            "retention": "PT36H",
            "retention_seconds": 129600,
            "fingerprint": "method, path, query parameters by name, and body decoded from its Content-Encoding (JSON canonicalized with exact numbers, form fields by name)",
            "key_max_length": 255,
        })
    );
    assert!(
        op["description"]
            .as_str()
            .unwrap()
            .contains("expire 36 hours")
    );

    // A replay carries any response the handler documents.
    let created = &op["responses"]["201"];
    assert_eq!(created["description"], "The widget was created");
    assert_eq!(
        created["headers"]["Idempotent-Replayed"]["schema"]["enum"],
        json!(["true"])
    );

    // A 5xx is never stored, so never replayed.
    assert!(op["responses"]["503"]["headers"]["Idempotent-Replayed"].is_null());

    let problem_ref = json!({ "$ref": "#/components/schemas/IdempotencyProblem" });
    for status in ["400", "409", "422"] {
        let response = &op["responses"][status];
        assert_eq!(
            response["content"]["application/problem+json"]["schema"], problem_ref,
            "{status}: {response}"
        );
    }
    assert!(
        op["responses"]["400"]["description"]
            .as_str()
            .unwrap()
            .contains("idempotency-key-missing")
    );
    assert_eq!(
        op["responses"]["409"]["headers"]["Retry-After"]["schema"]["type"],
        "integer"
    );
    // The handler's own 422 keeps its description; idem's meaning is added.
    let unprocessable = op["responses"]["422"]["description"].as_str().unwrap();
    assert!(
        unprocessable.starts_with("The widget is not valid"),
        "{unprocessable}"
    );
    assert!(
        unprocessable.contains("idempotency-key-reused"),
        "{unprocessable}"
    );

    let schema = &doc["components"]["schemas"]["IdempotencyProblem"];
    assert_eq!(
        schema["required"],
        json!(["type", "title", "status", "detail"])
    );
    assert_eq!(
        schema["properties"]["mismatch"]["enum"],
        json!(["method_or_path", "body"])
    );
}

#[test]
fn an_operation_under_a_prefix_is_matched_by_its_operation_id() {
    let doc = document();
    let op = &doc["paths"]["/v1/accounts/{account}/refunds"]["post"];
    assert_eq!(key_header(op)["required"], true);
    assert_eq!(op["x-idempotency"]["retention"], "P7D");
    assert_eq!(op["x-idempotency"]["retention_seconds"], 7 * 86_400);
    assert!(op["responses"]["409"].is_object());
}

#[test]
fn other_operations_are_left_alone() {
    let doc = document();
    let op = &doc["paths"]["/ping"]["post"];
    assert!(op.get("parameters").is_none(), "{op}");
    assert!(op.get("x-idempotency").is_none());
    assert_eq!(
        op["responses"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["200"]
    );
    assert!(op["responses"]["200"].get("headers").is_none());
}

#[test]
fn idem_documents_every_problem_it_sends_itself() {
    let doc = document();
    let op = &doc["paths"]["/accounts/{account}/widgets"]["post"];
    let problem_ref = json!({ "$ref": "#/components/schemas/IdempotencyProblem" });
    for (status, slugs) in [
        ("413", &["request-body-too-large"][..]),
        (
            "500",
            &[
                "response-too-large",
                "handler-panicked",
                "transaction-ended",
                "operation-failed",
            ][..],
        ),
        ("503", &["storage-unavailable", "storage-busy"][..]),
    ] {
        let response = &op["responses"][status];
        assert_eq!(
            response["content"]["application/problem+json"]["schema"], problem_ref,
            "{status}: {response}"
        );
        let described = response["description"].as_str().unwrap();
        for slug in slugs {
            assert!(
                described.contains(slug),
                "{status} names {slug}: {described}"
            );
        }
    }
    // The handler's own 503 keeps its description; a 5xx is still never replayed.
    let unavailable = op["responses"]["503"]["description"].as_str().unwrap();
    assert!(unavailable.starts_with("Try again later"), "{unavailable}");
    let headers = &op["responses"]["503"]["headers"];
    assert!(headers["Idempotent-Replayed"].is_null(), "{headers}");
    assert_eq!(headers["Retry-After"]["schema"]["type"], "integer");
    assert!(op["responses"]["500"].get("headers").is_none());
    // The 413 is idem's refusal before the key is claimed: nothing stored, nothing replayed.
    assert!(op["responses"]["413"].get("headers").is_none());
}

#[test]
fn the_key_schema_says_which_values_the_server_accepts() {
    let doc = document();
    let op = &doc["paths"]["/accounts/{account}/widgets"]["post"];
    let pattern = key_header(op)["schema"]["pattern"]
        .as_str()
        .expect("a pattern");
    // Bare visible ASCII not starting with a quote, or a Structured Field string of
    // visible ASCII with `\"` and `\\` escapes: what `IdempotencyKey::parse` accepts.
    assert_eq!(
        pattern,
        r#"^(?:[!#-~][!-~]{0,254}|"(?:[!#-\[\]-~]|\\["\\]){1,255}")$"#
    );
}

/// The example's document: every answer its handlers give besides idem's, in particular
/// the 415 of a body not sent as JSON, and request schemas as strict as the server.
#[test]
fn the_example_documents_what_its_server_answers() {
    let text = example_openapi::ApiDoc::openapi()
        .to_json()
        .expect("the document serializes");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    for (path, method) in [
        ("/orders", "post"),
        ("/orders", "get"),
        ("/orders/{id}", "get"),
        ("/payments/{id}", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is documented");
        let account = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "X-Account-Id")
            .expect("X-Account-Id");
        assert_eq!(account["required"], true);
        assert_eq!(account["schema"]["minimum"], 1, "{method} {path}");
    }
    let create = &doc["paths"]["/orders"]["post"];
    assert!(create["responses"]["415"].is_object(), "{create}");
    assert!(create["responses"]["413"].is_object(), "{create}");
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["NewOrder"]["properties"]["quantity"]["minimum"], 1);
    assert_eq!(
        schemas["NewOrder"]["properties"]["amount_cents"]["minimum"],
        0
    );
    let payment = &schemas["NewPayment"];
    assert_eq!(payment["additionalProperties"], false);
    assert_eq!(payment["properties"]["currency"]["pattern"], "^[A-Z]{3}$");
    assert_eq!(payment["properties"]["amount_cents"]["minimum"], 1);
    assert_eq!(
        payment["properties"]["amount_cents"]["maximum"],
        100_000_000
    );
}

/// A method a path does not serve is 405 with `Allow` listing the ones it does, as an
/// RFC 9457 problem: not the 404 of a path that does not exist.
async fn an_undeclared_method_is_405_with_allow<DB: TestBackend>() {
    let env = support::Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    for (method, uri, allow) in [
        ("TRACE", "/orders", "GET, POST"),
        ("PUT", "/orders", "GET, POST"),
        ("DELETE", "/orders/1", "GET"),
        ("POST", "/health", "GET"),
    ] {
        let reply = app
            .call(
                TestRequest::default()
                    .method(method.parse().unwrap())
                    .uri(uri)
                    .insert_header(("x-account-id", ALICE.to_string())),
            )
            .await;
        assert_eq!(reply.header("allow"), Some(allow), "{method} {uri}");
        let problem = reply.assert_problem(405, &format!("{APP_PROBLEM}method-not-allowed"));
        assert!(
            problem["detail"].as_str().unwrap().contains(allow),
            "{problem}"
        );
    }
    // A path that does not exist is still 404.
    let reply = app
        .call(
            TestRequest::default()
                .method("TRACE".parse().unwrap())
                .uri("/nowhere"),
        )
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(env.keys().await, 0);
}

/// The document says `integer`, which JSON Schema reads as any number without a
/// fractional part: `2.0` is an integer, `2.5` is not.
async fn an_integer_may_be_written_with_a_zero_fraction<DB: TestBackend>() {
    let env = support::Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let whole = r#"{"item":"pen","quantity":2.0,"amount_cents":1.5e2}"#;
    let reply = app.call(support::post_order(ALICE, "whole", whole)).await;
    assert_eq!(
        reply.status,
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["quantity"], 2);
    assert_eq!(reply.json()["amount_cents"], 150);
    for (key, body) in [
        (
            "half",
            r#"{"item":"pen","quantity":2.5,"amount_cents":150}"#,
        ),
        (
            "huge",
            r#"{"item":"pen","quantity":3e9,"amount_cents":150}"#,
        ),
        (
            "text",
            r#"{"item":"pen","quantity":"2","amount_cents":150}"#,
        ),
    ] {
        let reply = app.call(support::post_order(ALICE, key, body)).await;
        reply.assert_app_problem(422, "invalid-order");
    }
    assert_eq!(env.orders().await, 1);
}

backend_tests!(
    an_undeclared_method_is_405_with_allow,
    an_integer_may_be_written_with_a_zero_fraction,
);
