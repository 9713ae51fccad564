//! Request heads past actix-web's limits (128 KiB of head, 96 header lines) are refused
//! with 431 by the HTTP layer, before the handler, idem or the database see them, so
//! nothing is stored; a large head under the limit is served normally.

use crate::phased_support;
use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use idem_testkit::TestDb;
use phased_support::{Example, count};
use support::{ALICE, order_json};

/// Sends `extra_headers` (each a full `name: value` line) with a keyed `POST /orders` over
/// a raw connection; returns the status code of the answer.
fn post_with_headers(base: &str, key: &str, extra_headers: &[String]) -> u16 {
    let addr = base.trim_start_matches("http://");
    let body = order_json("tea", 1, 100);
    let mut request = format!(
        "POST /orders HTTP/1.1\r\nhost: {addr}\r\nx-account-id: {ALICE}\r\n\
         idempotency-key: {key}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for line in extra_headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(&body);

    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    // The server may answer and close before it read everything: a failed write is
    // expected then, and the answer is read all the same.
    let _ = stream.write_all(request.as_bytes());
    let mut answer = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(error) => {
                assert!(
                    !answer.is_empty(),
                    "the connection failed before any answer: {error}"
                );
                break;
            }
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"))
}

async fn heads_past_the_limits_are_431_and_store_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool(2).await;
    let example = Example::start(db.url(), None).await;
    let base = example.base.clone();

    let statuses = tokio::task::spawn_blocking(move || {
        let one_huge = vec![format!("x-padding: {}", "a".repeat(200 * 1024))];
        let many: Vec<String> = (0..100).map(|i| format!("x-h{i}: {i}")).collect();
        let huge_key_base = "k".repeat(140 * 1024);
        [
            post_with_headers(&base, "huge-header", &one_huge),
            post_with_headers(&base, "many-headers", &many),
            post_with_headers(&base, &huge_key_base, &[]),
        ]
    })
    .await
    .expect("client thread");
    assert_eq!(statuses, [431, 431, 431]);
    assert_eq!(count(&pool, "idem_keys").await, 0, "no key stored");
    assert_eq!(count(&pool, "orders").await, 0, "no order stored");

    // Under the limits: 64 KiB of head and 80 header lines are served.
    let base = example.base.clone();
    let served = tokio::task::spawn_blocking(move || {
        let large = vec![format!("x-padding: {}", "a".repeat(64 * 1024))];
        let several: Vec<String> = (0..80).map(|i| format!("x-h{i}: {i}")).collect();
        [
            post_with_headers(&base, "large-header", &large),
            post_with_headers(&base, "several-headers", &several),
        ]
    })
    .await
    .expect("client thread");
    assert_eq!(served, [201, 201]);
    assert_eq!(count(&pool, "idem_keys").await, 2);
    example.stop().await;
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    heads_past_the_limits_are_431_and_store_nothing,
);
