//! One account floods the example with unique keys, some of them the very keys another
//! account uses, while that other account goes about its business: every one of the
//! other account's requests succeeds and replays, because keys of different scopes share
//! no lock and no limit. (The pool and the CPU are shared: rate limiting per account
//! belongs in front of the service, see RELIABILITY.md.)

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fault_support::{assert_same_answer, client, is_replay, keys_of, post_order};
use idem_testkit::TestDb;
use phased_support::{Example, send};
use support::{ALICE, BOB, order_json};

/// Requests of the flooding account, and how many it has in flight at once (the
/// example's pool has 20 connections).
const FLOOD: usize = 3000;
const FLOOD_CONCURRENCY: usize = 16;
/// Keyed requests of the other account, each followed by a replay.
const VICTIM: usize = 40;

async fn a_flood_of_keys_from_one_account_does_not_fail_another() {
    let db = TestDb::new().await;
    let pool = db.pool(2).await;
    let example = Example::start(db.url(), None).await;
    let http = client(Duration::from_secs(60));
    let next = Arc::new(AtomicUsize::new(0));

    let mut flooders = Vec::new();
    for _ in 0..FLOOD_CONCURRENCY {
        let (http, base, next) = (http.clone(), example.base.clone(), next.clone());
        flooders.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= FLOOD {
                    return statuses;
                }
                let key = format!("key-{n}");
                let body = order_json("flood", 1, 1);
                let reply = send(post_order(&http, &base, "/orders", BOB, &key, &body)).await;
                statuses.push(reply.map_or(0, |r| r.status));
            }
        }));
    }

    // Meanwhile the other account sends its own keys, named like the flood's.
    let mut victim_ok = 0;
    for n in 0..VICTIM {
        let key = format!("key-{}", n * 50);
        let body = order_json("mine", 2, 250);
        let first = send(post_order(
            &http,
            &example.base,
            "/orders",
            ALICE,
            &key,
            &body,
        ))
        .await
        .expect("answered");
        assert_eq!(first.status, 201, "{key}: {}", first.text());
        assert!(!is_replay(&first), "{key}: not another account's answer");
        assert_eq!(first.json()["item"], "mine");
        let again = send(post_order(
            &http,
            &example.base,
            "/orders",
            ALICE,
            &key,
            &body,
        ))
        .await
        .expect("answered");
        assert_same_answer(&first, &again, &key);
        victim_ok += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut flood_statuses = Vec::new();
    for flooder in flooders {
        flood_statuses.extend(flooder.await.expect("flooder"));
    }
    let flood_created = flood_statuses.iter().filter(|&&s| s == 201).count();
    assert_eq!(
        flood_created,
        FLOOD,
        "the flood itself is served too: {:?}",
        flood_statuses
            .iter()
            .filter(|&&s| s != 201)
            .take(10)
            .collect::<Vec<_>>()
    );
    assert_eq!(keys_of(&pool, ALICE).await.len(), VICTIM);
    assert_eq!(keys_of(&pool, BOB).await.len(), FLOOD);
    eprintln!(
        "key_flood: {FLOOD} unique keys from one account ({FLOOD_CONCURRENCY} at a time), \
         {victim_ok}/{VICTIM} requests of another account created and replayed, 0 failures"
    );
    example.stop().await;
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    a_flood_of_keys_from_one_account_does_not_fail_another,
);
