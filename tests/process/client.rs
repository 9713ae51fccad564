//! idem-client's middleware against the example service, the real binary: a response
//! lost on the way back, a duplicate that meets the first request in flight, and a key
//! reused for a different request.

use crate::phased_support;
use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_client::{ExponentialBackoff, IdempotencyMiddleware};
use idem_testkit::TestDb;
use phased_support::{Example, count};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use support::{ALICE, order_json};

/// Sits behind the idempotency middleware, on the wire side: records the key and status
/// of every attempt and, if told to, swaps the first answer for a 502, like a gateway
/// whose upstream answered after it gave up.
#[derive(Default)]
struct Wire {
    attempts: Mutex<Vec<(String, u16)>>,
    lose_first_answer: bool,
}

#[async_trait::async_trait]
impl Middleware for Wire {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let key = req.headers()["idempotency-key"]
            .to_str()
            .unwrap()
            .to_owned();
        let response = next.run(req, extensions).await?;
        let first = {
            let mut attempts = self.attempts.lock().unwrap();
            attempts.push((key, response.status().as_u16()));
            attempts.len() == 1
        };
        if self.lose_first_answer && first {
            // Read the real answer fully, so the server sees a completed exchange.
            response.bytes().await?;
            return Ok(http::Response::builder()
                .status(502)
                .body("upstream timed out")
                .unwrap()
                .into());
        }
        Ok(response)
    }
}

impl Wire {
    fn attempts(&self) -> Vec<(String, u16)> {
        self.attempts.lock().unwrap().clone()
    }
}

fn client(wire: &Arc<Wire>) -> ClientWithMiddleware {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(20), Duration::from_millis(200))
        .build_with_max_retries(5);
    ClientBuilder::new(reqwest::Client::new())
        .with(IdempotencyMiddleware::with_policy(policy))
        .with_arc(Arc::clone(wire) as Arc<dyn Middleware>)
        .build()
}

async fn a_lost_answer_is_retried_with_the_same_key_and_replayed() {
    let db = TestDb::new().await;
    let example = Example::start(db.url(), None).await;
    let wire = Arc::new(Wire {
        lose_first_answer: true,
        ..Wire::default()
    });
    let response = client(&wire)
        .post(format!("{}/orders", example.base))
        .header("x-account-id", ALICE.to_string())
        .header("content-type", "application/json")
        .body(order_json("green tea", 2, 1299))
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let attempts = wire.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].0, attempts[1].0, "one key for both attempts");
    assert_eq!(attempts[0].1, 201, "the first attempt did create the order");
    let pool = db.pool(1).await;
    assert_eq!(count(&pool, "orders").await, 1, "one order, not two");
    example.stop().await;
}

async fn a_duplicate_in_flight_waits_out_the_409_and_gets_the_replay() {
    let db = TestDb::new().await;
    let example = Example::start(db.url(), None).await;
    let pool = db.pool(1).await;
    let url = format!("{}/orders?delay_ms=3000", example.base);
    let body = order_json("green tea", 2, 1299);
    let first = tokio::spawn(
        reqwest::Client::new()
            .post(&url)
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", "in-flight")
            .header("content-type", "application/json")
            .body(body.clone())
            .send(),
    );
    // The first request holds its key once its insert waits in the open transaction.
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let holding: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT FROM pg_stat_activity \
                  WHERE datname = current_database() AND state = 'idle in transaction' \
                    AND query LIKE 'INSERT INTO orders%')",
            )
            .fetch_one(&pool)
            .await
            .expect("read pg_stat_activity");
            if holding {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first request is in flight");

    let wire = Arc::new(Wire::default());
    let response = client(&wire)
        .post(&url)
        .header("x-account-id", ALICE.to_string())
        .header("idempotency-key", "in-flight")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let attempts = wire.attempts();
    assert!(attempts.len() >= 2, "{attempts:?}");
    assert_eq!(attempts[0], ("in-flight".to_owned(), 409));
    assert!(attempts.iter().all(|(key, _)| key == "in-flight"));

    let first = first.await.unwrap().expect("the first request's answer");
    assert_eq!(first.status(), 201);
    assert_eq!(count(&pool, "orders").await, 1);
    example.stop().await;
}

async fn a_key_reused_for_another_request_gets_422_once() {
    let db = TestDb::new().await;
    let example = Example::start(db.url(), None).await;
    let wire = Arc::new(Wire::default());
    let client = client(&wire);
    let send = |body: String| {
        client
            .post(format!("{}/orders", example.base))
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", "reused")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    assert_eq!(send(order_json("tea", 1, 100)).await.unwrap().status(), 201);
    let reused = send(order_json("coffee", 1, 100)).await.unwrap();
    assert_eq!(reused.status(), 422);
    assert_eq!(wire.attempts().len(), 2, "the 422 was not retried");
    example.stop().await;
}

support::both_frameworks!(
    #[tokio::test]
    a_lost_answer_is_retried_with_the_same_key_and_replayed,
    #[tokio::test]
    a_duplicate_in_flight_waits_out_the_409_and_gets_the_replay,
    #[tokio::test]
    a_key_reused_for_another_request_gets_422_once,
);
