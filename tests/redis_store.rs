//! The Redis key store against a real `redis-server` this binary starts on a free
//! loopback port: claim, replay data, in-flight, mismatch, takeover with a new token,
//! fenced stale holders, release, TTL expiry, foreign values, an unreachable server; and
//! a model-based test over claims, takeovers, stale writes and expiry
//! (`redis_support/model.rs`).
//!
//! Time moves by Redis's own TTLs: a short lease or retention, then polling until Redis
//! says it ended; no assertion bounds the wall clock.

mod redis_support;

use std::time::Duration;

use idem::redis::{Attempt, RedisClaim, RedisRequest, RedisStore, RedisStoreError, Released};
use redis_support::{Server, request, until};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

async fn claimed(store: &RedisStore, req: &RedisRequest<'_>) -> Attempt {
    match store.claim(req).await.expect("claim") {
        RedisClaim::Claimed(attempt) => attempt,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Waits until the key's lease has ended, and returns the stopped attempt's token.
async fn lease_ended(store: &RedisStore, req: &RedisRequest<'_>) -> i64 {
    until(|| async {
        match store.claim(req).await.expect("claim") {
            RedisClaim::LeaseEnded { fencing_token } => Some(fencing_token),
            RedisClaim::InFlight { .. } => None,
            other => panic!("expected the lease to end, got {other:?}"),
        }
    })
    .await
}

#[tokio::test]
async fn a_first_claim_holds_the_key_and_a_duplicate_sees_it_in_flight() {
    let server = Server::start().await;
    let req = request("k1", 1, LEASE, RETENTION);
    let attempt = claimed(&server.store, &req).await;
    assert_eq!(attempt.generation, attempt.fencing_token);
    assert!(attempt.recorded.is_empty() && attempt.recovery_point.is_none());
    match server.store.claim(&req).await.unwrap() {
        RedisClaim::InFlight { retry_after } => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= LEASE,
                "{retry_after:?}"
            );
        }
        other => panic!("expected in flight, got {other:?}"),
    }
}

#[tokio::test]
async fn a_completed_key_replays_its_answer() {
    let server = Server::start().await;
    let req = request("k2", 1, LEASE, RETENTION);
    let attempt = claimed(&server.store, &req).await;
    let headers = b"location: /n/1\r\n";
    let body = b"{\"id\":1}\x00\xff";
    assert!(
        server
            .store
            .complete(&attempt, 201, headers, body)
            .await
            .unwrap()
    );
    for _ in 0..2 {
        match server.store.claim(&req).await.unwrap() {
            RedisClaim::Completed(answer) => {
                assert_eq!(answer.status, 201);
                assert_eq!(&answer.headers[..], headers);
                assert_eq!(&answer.body[..], body);
                assert_eq!(answer.generation, attempt.generation);
            }
            other => panic!("expected a replay, got {other:?}"),
        }
    }
    // The lease went with the completion; the record keeps the retention.
    assert_eq!(
        server.pttl(&format!("{}:lease", server.record("k2"))).await,
        -2
    );
    let ttl = server.pttl(&server.record("k2")).await;
    assert!(ttl > 0 && ttl <= 3_600_000, "{ttl}");
}

#[tokio::test]
async fn a_different_request_under_the_key_is_a_mismatch() {
    let server = Server::start().await;
    let attempt = claimed(&server.store, &request("k3", 1, LEASE, RETENTION)).await;
    let other = request("k3", 2, LEASE, RETENTION);
    for done in [false, true] {
        if done {
            assert!(
                server
                    .store
                    .complete(&attempt, 200, b"", b"ok")
                    .await
                    .unwrap()
            );
        }
        match server.store.claim(&other).await.unwrap() {
            RedisClaim::Mismatch { method, path } => {
                assert_eq!((method.as_str(), path.as_str()), ("POST", "/notifications"));
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn after_the_lease_a_retry_takes_over_with_a_new_token_and_the_phases() {
    let server = Server::start().await;
    let req = request("k4", 1, Duration::from_millis(50), RETENTION);
    let first = claimed(&server.store, &req).await;
    assert!(
        server
            .store
            .record_phase(&first, "charge", "{\"id\":\"ch_1\"}")
            .await
            .unwrap()
    );
    assert!(
        server
            .store
            .record_phase(&first, "email", "\"sent\"")
            .await
            .unwrap()
    );
    let seen = lease_ended(&server.store, &req).await;
    assert_eq!(seen, first.fencing_token);
    let second = server
        .store
        .take_over(&req, seen)
        .await
        .unwrap()
        .expect("takeover");
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(second.generation, first.generation);
    assert_eq!(second.recovery_point.as_deref(), Some("email"));
    assert_eq!(
        second.recorded,
        [
            ("charge".to_owned(), "{\"id\":\"ch_1\"}".to_owned()),
            ("email".to_owned(), "\"sent\"".to_owned())
        ]
    );
    // Of two retries that saw the same token, one wins.
    assert!(server.store.take_over(&req, seen).await.unwrap().is_none());
}

#[tokio::test]
async fn a_stale_holders_writes_are_refused_after_a_takeover() {
    let server = Server::start().await;
    let req = request("k5", 1, Duration::from_millis(50), RETENTION);
    let stale = claimed(&server.store, &req).await;
    let seen = lease_ended(&server.store, &req).await;
    let fresh = server
        .store
        .take_over(&req, seen)
        .await
        .unwrap()
        .expect("takeover");

    assert!(
        !server
            .store
            .record_phase(&stale, "charge", "1")
            .await
            .unwrap()
    );
    assert!(!server.store.extend_lease(&stale).await.unwrap());
    assert!(
        !server
            .store
            .complete(&stale, 200, b"", b"stale")
            .await
            .unwrap()
    );
    assert_eq!(
        server.store.release(&stale).await.unwrap(),
        Released::Fenced
    );

    assert!(server.store.extend_lease(&fresh).await.unwrap());
    assert!(
        server
            .store
            .record_phase(&fresh, "charge", "2")
            .await
            .unwrap()
    );
    assert!(
        server
            .store
            .complete(&fresh, 201, b"", b"fresh")
            .await
            .unwrap()
    );
    assert!(
        !server
            .store
            .complete(&stale, 200, b"", b"stale")
            .await
            .unwrap()
    );
    match server.store.claim(&req).await.unwrap() {
        RedisClaim::Completed(answer) => assert_eq!(&answer.body[..], b"fresh"),
        other => panic!("expected the fresh answer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_release_lets_a_retry_run() {
    let server = Server::start().await;
    // Nothing recorded: the key goes, and the retry is a first request with a new token.
    let req = request("k6", 1, LEASE, RETENTION);
    let first = claimed(&server.store, &req).await;
    assert_eq!(
        server.store.release(&first).await.unwrap(),
        Released::Deleted
    );
    let retry = claimed(&server.store, &req).await;
    assert!(retry.fencing_token > first.fencing_token);
    assert_eq!(
        server.store.release(&first).await.unwrap(),
        Released::Fenced
    );

    // A phase recorded: only the lease ends, and the retry resumes after the phase.
    assert!(
        server
            .store
            .record_phase(&retry, "charge", "1")
            .await
            .unwrap()
    );
    assert_eq!(
        server.store.release(&retry).await.unwrap(),
        Released::LeaseEnded
    );
    let seen = match server.store.claim(&req).await.unwrap() {
        RedisClaim::LeaseEnded { fencing_token } => fencing_token,
        other => panic!("expected the lease ended, got {other:?}"),
    };
    let resumed = server
        .store
        .take_over(&req, seen)
        .await
        .unwrap()
        .expect("takeover");
    assert_eq!(resumed.recorded, [("charge".to_owned(), "1".to_owned())]);
    assert_eq!(resumed.generation, retry.generation);
}

#[tokio::test]
async fn a_token_is_never_handed_out_again_even_after_the_counter_expired() {
    let server = Server::start().await;
    let req = request("k14", 1, LEASE, RETENTION);
    let stale = claimed(&server.store, &req).await;
    server.expire_now(&server.record("k14")).await;
    server
        .expire_now(&format!("{}:token", server.record("k14")))
        .await;
    // The counter starts again from the server's clock, past every earlier token.
    let fresh = claimed(&server.store, &req).await;
    assert!(fresh.fencing_token > stale.fencing_token);
    assert!(
        !server
            .store
            .complete(&stale, 200, b"", b"stale")
            .await
            .unwrap()
    );
    assert!(
        server
            .store
            .complete(&fresh, 200, b"", b"fresh")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn redis_expires_a_completed_key_after_its_retention() {
    let server = Server::start().await;
    let req = request("k7", 1, LEASE, Duration::from_millis(100));
    let first = claimed(&server.store, &req).await;
    assert!(
        server
            .store
            .record_phase(&first, "send", "1")
            .await
            .unwrap()
    );
    assert!(
        server
            .store
            .complete(&first, 200, b"", b"done")
            .await
            .unwrap()
    );
    let again = until(|| async {
        match server.store.claim(&req).await.unwrap() {
            RedisClaim::Claimed(attempt) => Some(attempt),
            RedisClaim::Completed(_) => None,
            other => panic!("expected a replay or a new claim, got {other:?}"),
        }
    })
    .await;
    assert!(again.generation > first.generation);
    assert!(again.recorded.is_empty());
    // Every key of the old life expired with it.
    let record = server.record("k7");
    for suffix in [":phases", ":phase:send"] {
        assert_eq!(
            server.pttl(&format!("{record}{suffix}")).await,
            -2,
            "{suffix}"
        );
    }
}

#[tokio::test]
async fn a_value_idem_did_not_write_is_a_clear_error() {
    let server = Server::start().await;
    let mut raw = server.raw.clone();
    let record = server.record("k8");
    let _: () = redis::cmd("SET")
        .arg(&record)
        .arg("someone else's")
        .query_async(&mut raw)
        .await
        .unwrap();
    let req = request("k8", 1, LEASE, RETENTION);
    let err = server.store.claim(&req).await.unwrap_err();
    assert!(
        matches!(&err, RedisStoreError::Foreign { key, found } if *key == record && found == "string"),
        "{err:?}"
    );
    assert!(!err.is_unavailable());
    assert!(err.to_string().contains("not a key idem wrote"), "{err}");

    let _: () = redis::cmd("DEL")
        .arg(&record)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&record)
        .arg("state")
        .arg("completed")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = server.store.claim(&req).await.unwrap_err();
    assert!(matches!(err, RedisStoreError::Foreign { .. }), "{err:?}");
}

#[tokio::test]
async fn a_server_that_forgot_the_scripts_is_sent_them_again() {
    let server = Server::start().await;
    let req = request("k12", 1, LEASE, RETENTION);
    let attempt = claimed(&server.store, &req).await;
    let mut raw = server.raw.clone();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        server
            .store
            .complete(&attempt, 200, b"", b"ok")
            .await
            .unwrap()
    );
    assert!(matches!(
        server.store.claim(&req).await.unwrap(),
        RedisClaim::Completed(_)
    ));
}

#[tokio::test]
async fn a_script_that_fails_is_an_error_never_an_answer() {
    let server = Server::start().await;
    let mut raw = server.raw.clone();
    // The key's counter holds a list: its INCR fails inside the claim.
    let _: () = redis::cmd("RPUSH")
        .arg(format!("{}:token", server.record("k13")))
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = server
        .store
        .claim(&request("k13", 1, LEASE, RETENTION))
        .await
        .unwrap_err();
    assert!(matches!(err, RedisStoreError::Redis(_)), "{err:?}");
    assert!(!err.is_unavailable(), "{err:?}");
    // Nothing was claimed: a script that fails writes nothing after its error, and this
    // one failed before its first write.
    assert_eq!(server.pttl(&server.record("k13")).await, -2);
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_saying_so() {
    let port = idem_testkit::free_port().unwrap();
    let err = RedisStore::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    // Reachable at first, then gone.
    let server = Server::start().await;
    let store = server.store.clone();
    drop(server);
    let err = store
        .claim(&request("k9", 1, LEASE, RETENTION))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_twenty_racing_duplicates_one_claims_and_one_takes_over() {
    let server = Server::start().await;
    let req = request("k11", 1, Duration::from_millis(50), RETENTION);
    let claims = futures_util::future::join_all((0..20).map(|_| server.store.claim(&req))).await;
    let mut winners = 0;
    for claim in claims {
        match claim.unwrap() {
            RedisClaim::Claimed(_) => winners += 1,
            RedisClaim::InFlight { .. } => {}
            other => panic!("expected a claim or in flight, got {other:?}"),
        }
    }
    assert_eq!(winners, 1);
    let seen = lease_ended(&server.store, &req).await;
    let takeovers =
        futures_util::future::join_all((0..20).map(|_| server.store.take_over(&req, seen))).await;
    let taken = takeovers
        .into_iter()
        .filter(|t| t.as_ref().unwrap().is_some())
        .count();
    assert_eq!(taken, 1);
}

#[tokio::test]
async fn waiting_for_replicas_reports_how_many_acknowledged() {
    let server = Server::start().await;
    let attempt = claimed(&server.store, &request("k10", 1, LEASE, RETENTION)).await;
    assert!(
        server
            .store
            .complete(&attempt, 200, b"", b"ok")
            .await
            .unwrap()
    );
    // A lone server has no replica: none acknowledges, and the wait ends at its timeout.
    let acked = server
        .store
        .wait_for_replicas(1, Duration::from_millis(20))
        .await
        .unwrap();
    assert_eq!(acked, 0);
    assert_eq!(
        server
            .store
            .wait_for_replicas(0, Duration::from_millis(20))
            .await
            .unwrap(),
        0
    );
}

#[test]
fn the_store_follows_the_model() {
    redis_support::model::explore();
}

#[tokio::test]
async fn on_a_cluster_every_script_stays_in_its_keys_slot() {
    let cluster = idem_testkit::RedisCluster::start();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&nodes).await.expect("connect");
    // Enough keys to land on every master.
    for i in 0..24 {
        let key = format!("cluster-{i}");
        let req = request(&key, 1, Duration::from_millis(50), RETENTION);
        let RedisClaim::Claimed(first) = store.claim(&req).await.unwrap() else {
            panic!("{key}: expected a claim");
        };
        assert!(store.record_phase(&first, "send", "1").await.unwrap());
        let seen = until(|| async {
            match store.claim(&req).await.unwrap() {
                RedisClaim::LeaseEnded { fencing_token } => Some(fencing_token),
                _ => None,
            }
        })
        .await;
        let second = store
            .take_over(&req, seen)
            .await
            .unwrap()
            .expect("takeover");
        assert_eq!(second.recorded, [("send".to_owned(), "1".to_owned())]);
        assert!(!store.complete(&first, 200, b"", b"stale").await.unwrap());
        assert!(store.complete(&second, 201, b"", b"ok").await.unwrap());
        match store.claim(&req).await.unwrap() {
            RedisClaim::Completed(answer) => assert_eq!(&answer.body[..], b"ok"),
            other => panic!("{key}: expected a replay, got {other:?}"),
        }
    }
}

/// `WAIT` on a cluster: the client sends a plain `WAIT` to every master and answers the
/// least count, so one master without a replica holds every key back;
/// `wait_for_replicas_of` asks the master of the key's slot only.
#[tokio::test]
async fn on_a_cluster_waiting_for_replicas_asks_the_keys_master() {
    let mut cluster = idem_testkit::RedisCluster::start_with_replicas(1);
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&nodes).await.expect("connect");
    let record = |key: &str| format!("idem:{{{}:{key}}}", redis_support::SCOPE);
    // Two keys on different masters.
    let first = "wait-0".to_owned();
    let first_master = cluster.master_of(&record(&first));
    let other = (1..)
        .map(|i| format!("wait-{i}"))
        .find(|k| cluster.master_of(&record(k)) != first_master)
        .unwrap();
    // The first key's master loses its replica.
    let replicas = cluster.replicas_of(first_master);
    assert_eq!(replicas.len(), 1, "one replica per master");
    cluster.kill(replicas[0]);
    for key in [&first, &other] {
        let attempt = claimed_on(&store, &request(key, 1, LEASE, RETENTION)).await;
        assert!(store.complete(&attempt, 200, b"", b"ok").await.unwrap());
    }
    // Redis's WAIT waits the whole timeout when too few replicas acknowledge: short.
    let short = Duration::from_millis(50);
    let scope = redis_support::SCOPE;
    let other_acked = until(|| async {
        // The killed replica may still be counted until its master sees the link drop.
        let n = store
            .wait_for_replicas_of(scope, &other, 1, short)
            .await
            .unwrap();
        (n == 1).then_some(n)
    })
    .await;
    assert_eq!(other_acked, 1);
    until(|| async {
        let n = store
            .wait_for_replicas_of(scope, &first, 1, short)
            .await
            .unwrap();
        (n == 0).then_some(())
    })
    .await;
    // The plain WAIT answers for the master without a replica, whichever key was written.
    assert_eq!(store.wait_for_replicas(1, short).await.unwrap(), 0);
}

async fn claimed_on(
    store: &RedisStore<redis::cluster_async::ClusterConnection>,
    req: &RedisRequest<'_>,
) -> Attempt {
    match store.claim(req).await.expect("claim") {
        RedisClaim::Claimed(attempt) => attempt,
        other => panic!("expected a claim, got {other:?}"),
    }
}
