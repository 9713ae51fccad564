//! The example binary publishes idem's metrics in Prometheus text at `GET /metrics` and
//! its OpenAPI document, with idem's additions, at `GET /openapi.json`: both binaries,
//! actix-web's `orders` and axum's `orders-axum`.

use crate::phased_support;
use crate::support;

use idem_testkit::TestDb;
use phased_support::{Example, example_tests, send};
use serde_json::json;
use support::{ALICE, order_json};

/// The value of the one sample of `name` whose labels include all of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let matching: Vec<_> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .collect();
    assert!(matching.len() <= 1, "one sample: {matching:?}");
    matching
        .first()
        .map(|line| line.rsplit(' ').next().unwrap().parse().expect("a number"))
}

async fn the_example_serves_metrics_and_its_openapi_document(binary: &'static str) {
    let db = TestDb::new().await;
    let example = Example::start_as(binary, db.url(), None).await;
    let client = reqwest::Client::new();
    let order = || {
        client
            .post(format!("{}/orders", example.base))
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", "observed")
            .header("content-type", "application/json")
            .body(order_json("tea", 1, 100))
    };
    assert_eq!(send(order()).await.unwrap().status, 201);
    assert_eq!(send(order()).await.unwrap().status, 201);

    let metrics = send(client.get(format!("{}/metrics", example.base)))
        .await
        .unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        metrics.header("content-type")
    );
    let text = metrics.text();
    // The example's handlers are registered with `.route(..)`, so the macro sees no route
    // attribute: the endpoint label is the handler's name (on axum, the one handler of
    // the database that serves).
    let endpoint = "endpoint=\"create_order\"";
    for outcome in ["executed", "replayed"] {
        let label = format!("outcome=\"{outcome}\"");
        assert_eq!(
            sample(&text, "idem_requests_total", &[endpoint, &label]),
            Some(1.0),
            "{text}"
        );
    }
    assert!(text.contains("# HELP idem_requests_total"), "{text}");
    let claim = "statement=\"claim\"";
    assert_eq!(
        sample(
            &text,
            "idem_statement_duration_seconds_count",
            &[endpoint, claim]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "idem_statement_duration_seconds_bucket",
            &[endpoint, claim, "le=\"+Inf\""]
        ),
        Some(2.0),
        "{text}"
    );

    let document = send(client.get(format!("{}/openapi.json", example.base)))
        .await
        .unwrap();
    assert_eq!(document.status, 200);
    let document = document.json();
    for (path, retention) in [("/orders", "P1D"), ("/payments", "P1D")] {
        let operation = &document["paths"][path]["post"];
        let key = operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap_or_else(|| panic!("{path} documents the key: {operation}"));
        assert_eq!(key["required"], true);
        // The longest header value (quoted, every character escaped); the key is 255 at most.
        assert_eq!(key["schema"]["maxLength"], 2 + 2 * 255);
        assert_eq!(operation["x-idempotency"]["key_max_length"], 255);
        assert_eq!(operation["x-idempotency"]["retention"], retention);
        assert_eq!(
            operation["responses"]["409"]["content"]["application/problem+json"]["schema"],
            json!({ "$ref": "#/components/schemas/IdempotencyProblem" })
        );
        assert!(operation["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    }
    example.stop().await;
}

example_tests!(the_example_serves_metrics_and_its_openapi_document);
