//! The client hangs up in the middle of a request: while it sends the body, while the
//! handler is inside its transaction, and right after the last byte. Whatever the
//! server did, the outcome is all or nothing: either the order and its key are committed
//! and the retry replays the stored answer, or neither is and the retry runs the handler.

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use fault_support::{
    assert_same_answer, client, is_replay, keys_of, post_order, until_final,
    wait_for_writing_transaction, wait_until_settled,
};
use idem_testkit::TestDb;
use phased_support::{Example, send};
use sqlx::PgPool;
use support::{ALICE, order_json};

/// Where the client hangs up.
#[derive(Debug, Clone, Copy)]
enum HangUp {
    /// After the head and half of the body.
    MidBody,
    /// While the handler sleeps after its insert, inside the transaction.
    InTransaction,
    /// Right after the last byte of the request.
    AfterSending,
}

/// Writes the request on a raw connection and closes it at `when`.
async fn hang_up(pool: &PgPool, base: &str, path: &str, key: &str, body: &str, when: HangUp) {
    let addr = base.trim_start_matches("http://");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nx-account-id: {ALICE}\r\n\
         idempotency-key: {key}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream.write_all(head.as_bytes()).expect("write the head");
    match when {
        HangUp::MidBody => {
            stream
                .write_all(&body.as_bytes()[..body.len() / 2])
                .expect("write half the body");
            // Let the server start reading the body before the connection goes.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        HangUp::InTransaction => {
            stream.write_all(body.as_bytes()).expect("write the body");
            wait_for_writing_transaction(pool, Duration::from_secs(30)).await;
        }
        HangUp::AfterSending => {
            stream.write_all(body.as_bytes()).expect("write the body");
        }
    }
    drop(stream);
}

async fn a_client_that_hangs_up_leaves_all_or_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool(4).await;
    let example = Example::start(db.url(), None).await;
    let http = client(Duration::from_secs(60));
    let cases = [
        (HangUp::MidBody, "/orders?delay_ms=1000"),
        (HangUp::InTransaction, "/orders?delay_ms=1000"),
        (HangUp::AfterSending, "/orders"),
        (HangUp::AfterSending, "/orders?delay_ms=200"),
    ];
    let mut outcomes = Vec::new();
    for (n, (when, path)) in cases.into_iter().enumerate() {
        let key = format!("hang-up-{n}");
        // The item names the key, so the order row of each case can be found.
        let body = order_json(&key, 1, 500 + n as i64);
        hang_up(&pool, &example.base, path, &key, &body, when).await;
        // Give the server time to notice; then wait until no transaction is open.
        tokio::time::sleep(Duration::from_millis(300)).await;
        wait_until_settled(&pool, Duration::from_secs(30)).await;

        let orders: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE item = $1")
            .bind(&key)
            .fetch_all(&pool)
            .await
            .expect("read orders");
        let stored = keys_of(&pool, ALICE)
            .await
            .into_iter()
            .find(|row| row.0 == key);
        let committed = match (&stored, orders.as_slice()) {
            (None, []) => false,
            (Some((_, state, Some(201), Some(_))), [_]) if state == "completed" => true,
            other => panic!("{when:?}: half an outcome: {other:?}"),
        };

        let retried = until_final(
            || post_order(&http, &example.base, path, ALICE, &key, &body),
            Duration::from_millis(100),
            Duration::from_secs(60),
        )
        .await;
        let reply = retried.last.expect("the retry is answered");
        assert_eq!(reply.status, 201, "{when:?}: {}", reply.text());
        assert_eq!(
            is_replay(&reply),
            committed,
            "{when:?}: the retry replays exactly when the first attempt committed"
        );
        if let Some((_, _, _, Some(stored_body))) = &stored {
            assert_eq!(&reply.body, stored_body, "{when:?}: the stored bytes");
        }
        let again = send(post_order(&http, &example.base, path, ALICE, &key, &body))
            .await
            .expect("answer");
        if committed {
            assert_eq!(again.body, reply.body, "{when:?}: replays agree");
        } else {
            assert_same_answer(&reply, &again, &key);
        }
        let rows: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE item = $1")
            .bind(&key)
            .fetch_all(&pool)
            .await
            .expect("read orders");
        assert_eq!(
            rows,
            vec![reply.json()["id"].as_i64().expect("order id")],
            "{when:?}: one order, the one the client was told about"
        );
        outcomes.push(format!(
            "{when:?}: {}",
            if committed {
                "committed, replayed"
            } else {
                "rolled back, re-run"
            }
        ));
    }
    eprintln!(
        "fault_client_disconnect: {} hang-ups ({}), 0 violations",
        outcomes.len(),
        outcomes.join("; ")
    );
    example.stop().await;
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_client_that_hangs_up_leaves_all_or_nothing,
);
