//! `idem stats` and `idem inspect` with `--redis-url`: the keys an application keeps in
//! Redis, written by idem's own store on a private `redis-server`, and on a cluster,
//! whose keys are spread over its masters.

mod support;

use std::time::Duration;

use idem_runtime::redis::{Attempt, RedisClaim, RedisRequest, RedisStore};
use idem_testkit::{RedisCluster, RedisServer};
use support::idem;

const LONG: Duration = Duration::from_secs(3600);

fn request(key: &str, lease: Duration) -> RedisRequest<'_> {
    RedisRequest {
        scope: "acct:7",
        key,
        fingerprint: [0xab; 32],
        method: "POST",
        path: "/notifications",
        lease,
        retention: LONG,
    }
}

async fn claim<C>(store: &RedisStore<C>, key: &str, lease: Duration) -> Attempt
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    match store.claim(&request(key, lease)).await.expect("claim") {
        RedisClaim::Claimed(attempt) => attempt,
        other => panic!("{key}: expected a claim, got {other:?}"),
    }
}

/// The words after `label` on its line of `out`.
fn line(out: &str, label: &str) -> Vec<String> {
    out.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("a line for {label}:\n{out}"))[label.len()..]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn stats_and_inspect_read_the_keys_in_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let store = RedisStore::connect(&url).await.expect("connect");

    let done = claim(&store, "sent", LONG).await;
    assert!(
        store
            .complete(&done, 202, b"location: /n/1\r\n", b"{\"id\":\"msg_1\"}")
            .await
            .unwrap()
    );
    let held = claim(&store, "held", LONG).await;
    assert!(store.record_phase(&held, "send", "{}").await.unwrap());
    claim(&store, "ended", Duration::from_millis(1)).await;
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("idem:{acct:someone}")
        .arg("else")
        .query_async(&mut raw)
        .await
        .unwrap();
    // Redis ends the lease of a millisecond by its own clock; wait until it has.
    while redis::cmd("EXISTS")
        .arg("idem:{acct%3A7:ended}:lease")
        .query_async::<i64>(&mut raw)
        .await
        .unwrap()
        == 1
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    let out = idem(&["--redis-url", &url, "stats"], &[]).success();
    // total, < 1 h, 1 h - 1 d, 1 d - 7 d, > 7 d
    assert_eq!(line(&out, "completed"), ["1", "1", "0", "0", "0"], "{out}");
    assert_eq!(line(&out, "started"), ["2", "2", "0", "0", "0"], "{out}");
    assert_eq!(line(&out, "all"), ["3"], "{out}");
    assert_eq!(line(&out, "in a lease"), ["1"], "{out}");
    assert_eq!(line(&out, "resumable")[0], "1", "{out}");
    assert_eq!(line(&out, "not idem's"), ["1"], "{out}");
    assert_eq!(line(&out, "without expiry"), ["0"], "{out}");
    let oldest = line(&out, "oldest in progress").join(" ");
    assert!(oldest.starts_with("scope \"acct:7\" key \""), "{out}");

    let shown = idem(&["--redis-url", &url, "inspect", "acct:7", "sent"], &[]).success();
    let field = |label: &str| line(&shown, label).join(" ");
    assert_eq!(field("state"), "completed", "{shown}");
    assert_eq!(field("request"), "POST /notifications", "{shown}");
    assert_eq!(field("fingerprint"), "ab".repeat(32), "{shown}");
    assert_eq!(field("status"), "202", "{shown}");
    assert_eq!(field("headers"), "location: /n/1", "{shown}");
    assert_eq!(field("body"), "14 bytes: {\"id\":\"msg_1\"}", "{shown}");
    assert_eq!(field("locked until"), "-", "{shown}");
    assert!(field("expires").contains("(in 59m"), "{shown}");

    let shown = idem(&["--redis-url", &url, "inspect", "acct:7", "held"], &[]).success();
    assert_eq!(line(&shown, "state"), ["started"], "{shown}");
    assert_eq!(line(&shown, "recovery point"), ["send"], "{shown}");
    assert_ne!(line(&shown, "locked until"), ["-"], "{shown}");

    let missing = idem(&["--redis-url", &url, "inspect", "acct:7", "nope"], &[]).one_line_error();
    assert_eq!(missing, "no key \"nope\" in scope \"acct:7\"");
    let foreign = idem(&["--redis-url", &url, "inspect", "acct", "someone"], &[]).one_line_error();
    assert!(foreign.contains("not a key idem wrote"), "{foreign}");
    let other = idem(&["--redis-url", &url, "expire", "--once"], &[]).one_line_error();
    assert!(other.contains("is for `stats` and `inspect`"), "{other}");
}

#[tokio::test]
async fn stats_on_a_cluster_count_every_masters_keys() {
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&nodes).await.expect("connect");
    for i in 0..30 {
        let attempt = claim(&store, &format!("k{i}"), LONG).await;
        assert!(store.complete(&attempt, 201, b"", b"{}").await.unwrap());
    }
    // Any one node: the CLI finds the others.
    let out = idem(&["--redis-url", &urls[1], "stats"], &[]).success();
    assert_eq!(line(&out, "all"), ["30"], "{out}");
    let shown = idem(&["--redis-url", &urls[0], "inspect", "acct:7", "k17"], &[]).success();
    assert_eq!(line(&shown, "state"), ["completed"], "{shown}");
}
