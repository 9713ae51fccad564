//! The middleware against servers that fail in the ways it must handle: an in-process
//! actix server answering from a script, and a raw TCP server that drops the connection
//! after reading the request. Each asserts the key sent on every attempt and the number
//! of attempts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use idem_client::{ExponentialBackoff, IdempotencyMiddleware};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers each request with the next `(status, Retry-After)` of the script, then 201;
/// records the `Idempotency-Key` of every request it saw.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<(u16, Option<&'static str>)>>,
    keys: Mutex<Vec<Option<String>>>,
}

impl Script {
    fn keys(&self) -> Vec<Option<String>> {
        self.keys.lock().unwrap().clone()
    }
}

async fn scripted(req: HttpRequest, script: web::Data<Script>) -> HttpResponse {
    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_owned());
    script.keys.lock().unwrap().push(key);
    let next = script.answers.lock().unwrap().pop_front();
    match next {
        None => HttpResponse::Created().body("created"),
        Some((status, retry_after)) => {
            let mut response =
                HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap());
            if let Some(delay) = retry_after {
                response.insert_header(("retry-after", delay));
            }
            response.body(format!("answer {status}"))
        }
    }
}

/// Starts the scripted server; returns its base URL and the script.
fn serve(answers: &[(u16, Option<&'static str>)]) -> (String, web::Data<Script>) {
    let script = web::Data::new(Script::default());
    script
        .answers
        .lock()
        .unwrap()
        .extend(answers.iter().copied());
    let data = script.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(scripted))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (format!("http://{addr}"), script)
}

/// The middleware with short backoffs, so the tests wait little; 3 retries.
fn client() -> ClientWithMiddleware {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(10), Duration::from_millis(50))
        .build_with_max_retries(3);
    ClientBuilder::new(reqwest::Client::new())
        .with(IdempotencyMiddleware::with_policy(policy))
        .build()
}

async fn post(client: &ClientWithMiddleware, base: &str) -> reqwest::Response {
    client
        .post(format!("{base}/orders"))
        .body("{}")
        .send()
        .await
        .expect("a response")
}

/// Every attempt carried the same key, a UUID v4; returns it.
fn one_key(keys: &[Option<String>]) -> String {
    let first = keys[0].clone().expect("the first attempt carried a key");
    assert!(
        keys.iter()
            .all(|key| key.as_deref() == Some(first.as_str())),
        "every attempt carries the same key: {keys:?}"
    );
    let uuid = uuid::Uuid::parse_str(&first).expect("the key is a UUID");
    assert_eq!(uuid.get_version_num(), 4, "a random (v4) UUID");
    first
}

#[actix_web::test]
async fn in_progress_409_is_retried_after_retry_after_with_the_same_key() {
    let (base, script) = serve(&[(409, Some("1")), (409, Some("1"))]);
    let response = post(&client(), &base).await;
    assert_eq!(response.status(), 201);
    let keys = script.keys();
    assert_eq!(keys.len(), 3, "two 409s, then the 201");
    one_key(&keys);
}

#[actix_web::test]
async fn a_422_is_returned_at_once() {
    let (base, script) = serve(&[(422, None)]);
    let response = post(&client(), &base).await;
    assert_eq!(response.status(), 422);
    assert_eq!(response.text().await.unwrap(), "answer 422");
    assert_eq!(script.keys().len(), 1, "a 422 is never retried");
}

#[actix_web::test]
async fn other_4xx_and_501_are_not_retried() {
    for status in [400, 401, 404, 413, 501] {
        let (base, script) = serve(&[(status, Some("1"))]);
        assert_eq!(post(&client(), &base).await.status(), status);
        assert_eq!(script.keys().len(), 1, "{status} is not retried");
    }
    // A 409 without Retry-After is a real conflict, not "in progress".
    let (base, script) = serve(&[(409, None)]);
    assert_eq!(post(&client(), &base).await.status(), 409);
    assert_eq!(script.keys().len(), 1);
}

#[actix_web::test]
async fn transient_failures_are_retried_with_the_same_key() {
    let (base, script) = serve(&[(503, None), (500, None), (408, None), (429, Some("0"))]);
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(10), Duration::from_millis(50))
        .build_with_max_retries(4);
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(IdempotencyMiddleware::with_policy(policy))
        .build();
    assert_eq!(post(&client, &base).await.status(), 201);
    let keys = script.keys();
    assert_eq!(keys.len(), 5);
    one_key(&keys);
}

#[actix_web::test]
async fn retries_are_bounded_and_the_last_answer_is_returned() {
    let (base, script) = serve(&[(503, None); 10]);
    let response = post(&client(), &base).await;
    assert_eq!(response.status(), 503);
    assert_eq!(script.keys().len(), 4, "the first attempt and 3 retries");
}

#[actix_web::test]
async fn a_retry_after_beyond_the_limit_is_returned_not_waited_for() {
    let (base, script) = serve(&[(409, Some("3600"))]);
    let response = post(&client(), &base).await;
    assert_eq!(response.status(), 409);
    assert_eq!(response.headers()["retry-after"], "3600");
    assert_eq!(script.keys().len(), 1);
}

#[actix_web::test]
async fn the_callers_key_is_kept_and_each_logical_request_gets_its_own() {
    let (base, script) = serve(&[(503, None)]);
    let client = client();
    let response = client
        .post(format!("{base}/orders"))
        .header("idempotency-key", "order-42")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(
        script.keys(),
        vec![Some("order-42".to_owned()), Some("order-42".to_owned())]
    );

    let (base, script) = serve(&[]);
    post(&client, &base).await;
    post(&client, &base).await;
    client.get(format!("{base}/orders")).send().await.unwrap();
    let keys = script.keys();
    assert_eq!(keys.len(), 3);
    assert_ne!(keys[0], keys[1], "two logical requests, two keys");
    assert_eq!(
        keys[2], None,
        "a GET is idempotent by itself and gets no key"
    );
}

/// A server that reads each request and records its key, then drops the first connection
/// without answering (the client cannot know whether the request took effect) and answers
/// the later ones 201.
async fn lossy_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    actix_web::rt::spawn(async move {
        for connection in 0.. {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client sent a whole request head");
                request.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&request).to_lowercase();
            let key = head
                .lines()
                .find_map(|line| line.strip_prefix("idempotency-key: "))
                .unwrap_or("")
                .trim()
                .to_owned();
            seen.lock().unwrap().push(key);
            if connection > 0 {
                socket
                    .write_all(
                        b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await
                    .unwrap();
            }
            // Dropping the socket closes the connection, answered or not.
        }
    });
    (format!("http://{addr}"), keys)
}

#[actix_web::test]
async fn a_connection_lost_before_the_answer_is_retried_with_the_same_key() {
    let (base, keys) = lossy_server().await;
    let response = post(&client(), &base).await;
    assert_eq!(response.status(), 201);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "the lost attempt and its retry");
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[0].len(), 36, "a UUID: {keys:?}");
}
