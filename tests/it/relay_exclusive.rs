//! The outbox relay gives each message to one relay at a time: while a relay is alive and
//! renewing its hold, no other relay delivers that message, however slow the consumer;
//! a relay that dies has its message delivered again by another one, counted as a second
//! attempt. Attempts count deliveries that really started.

use crate::support;

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use idem::outbox::{Message, Relay, RelayHandle};
use sqlx::Pool;
use support::{Env, TestBackend};

/// The delivery timeout of every relay here.
const TIMEOUT: Duration = Duration::from_secs(1);

/// How often an idle relay looks for due messages.
const POLL: Duration = Duration::from_millis(50);

/// What the consumers saw, shared by all relays of a test.
#[derive(Debug, Default)]
struct Seen {
    /// Messages whose delivery has started and not yet ended.
    in_flight: HashSet<String>,
    /// Messages whose delivery started while another delivery of them was in flight.
    overlaps: Vec<String>,
    /// `(id, attempt)` of every delivery started, in order.
    deliveries: Vec<(String, u32)>,
}

#[derive(Debug, Clone, Default)]
struct Tracker(Arc<Mutex<Seen>>);

impl Tracker {
    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.0.lock().expect("tracker lock")
    }

    /// Records that a delivery starts; the delivery ends when the guard drops, also when
    /// the relay running it is killed and drops the consumer's future.
    fn start(&self, message: &Message) -> InFlight {
        let mut seen = self.lock();
        let id = message.id().to_owned();
        if !seen.in_flight.insert(id.clone()) {
            seen.overlaps.push(id.clone());
        }
        seen.deliveries.push((id.clone(), message.attempt()));
        InFlight {
            tracker: self.clone(),
            id,
        }
    }

    /// A consumer that takes `work` per message and never fails.
    fn consumer(
        &self,
        work: Duration,
    ) -> impl Fn(Message) -> BoxFuture<'static, Result<(), Infallible>> + Send + Sync + 'static
    {
        let tracker = self.clone();
        move |message| {
            let in_flight = tracker.start(&message);
            Box::pin(async move {
                tokio::time::sleep(work).await;
                drop(in_flight);
                Ok(())
            })
        }
    }

    fn deliveries(&self) -> Vec<(String, u32)> {
        self.lock().deliveries.clone()
    }

    fn overlaps(&self) -> Vec<String> {
        self.lock().overlaps.clone()
    }
}

struct InFlight {
    tracker: Tracker,
    id: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.tracker.lock().in_flight.remove(&self.id);
    }
}

/// Writes `count` messages with idem's own enqueue statement; returns their ids.
async fn enqueue<DB: TestBackend>(pool: &Pool<DB>, count: usize) -> Vec<String> {
    let mut conn = pool.acquire().await.expect("a connection");
    let mut ids = Vec::new();
    for n in 0..count {
        let payload = serde_json::json!({ "n": n }).to_string();
        let id = DB::enqueue(&mut conn, "test", &payload)
            .await
            .expect("enqueue");
        ids.push(id);
    }
    ids
}

async fn delivered<DB: TestBackend>(pool: &Pool<DB>) -> i64 {
    DB::scalar(
        pool,
        "SELECT count(*) FROM idem_outbox WHERE delivered_at IS NOT NULL",
    )
    .await
}

/// Waits until `count` messages are marked delivered. The deadline only keeps a broken
/// relay from hanging the suite; nothing is asserted about how long delivery took.
async fn wait_until_delivered<DB: TestBackend>(pool: &Pool<DB>, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = delivered(pool).await;
        if done == count {
            return;
        }
        assert!(Instant::now() < deadline, "{done} of {count} delivered");
        tokio::time::sleep(POLL).await;
    }
}

/// `attempts` of every message, in write order.
async fn attempts<DB: TestBackend>(pool: &Pool<DB>) -> Vec<String> {
    DB::texts(
        pool,
        "SELECT CAST(attempts AS TEXT) FROM idem_outbox ORDER BY seq",
    )
    .await
}

fn relay<DB: TestBackend>(pool: &Pool<DB>, batch: u32) -> Relay<DB> {
    Relay::new(pool.clone())
        .batch_size(batch)
        .delivery_timeout(TIMEOUT)
        .poll_interval(POLL)
}

async fn stop_all(relays: impl IntoIterator<Item = RelayHandle>) {
    for relay in relays {
        relay.stop().await;
    }
}

/// Distinct ids among `deliveries`.
fn distinct(deliveries: &[(String, u32)]) -> HashSet<&str> {
    deliveries.iter().map(|(id, _)| id.as_str()).collect()
}

/// Batches that take longer to deliver than the timeout: the second relay, starting
/// after the first relay's batch hold has run out, takes none of the messages the first
/// one is delivering or is about to deliver, and never delivers one at the same time.
async fn two_relays_never_deliver_a_message_at_the_same_time<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let ids = enqueue(&env.pool, 16).await;
    let tracker = Tracker::default();
    let work = Duration::from_millis(400);

    let first = relay(&env.pool, 8).spawn(tracker.consumer(work));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = relay(&env.pool, 8).spawn(tracker.consumer(work));
    wait_until_delivered(&env.pool, 16).await;
    stop_all([first, second]).await;

    let deliveries = tracker.deliveries();
    assert_eq!(
        tracker.overlaps(),
        Vec::<String>::new(),
        "messages delivered while another delivery of them ran; all deliveries: {deliveries:?}"
    );
    assert_eq!(
        distinct(&deliveries),
        ids.iter().map(String::as_str).collect(),
        "every message delivered"
    );
    assert_eq!(
        deliveries.len(),
        16,
        "no message delivered twice: {deliveries:?}"
    );
    assert!(
        deliveries.iter().all(|(_, attempt)| *attempt == 1),
        "every delivery is the first attempt: {deliveries:?}"
    );
    assert_eq!(attempts(&env.pool).await, vec!["1"; 16]);
}

/// A consumer slower than the delivery timeout: the relay delivering a message keeps
/// renewing its hold, so the other relay never delivers that message meanwhile.
async fn a_consumer_slower_than_the_timeout_keeps_its_message<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let ids = enqueue(&env.pool, 3).await;
    let tracker = Tracker::default();
    let work = Duration::from_millis(2500);

    let relays = [
        relay(&env.pool, 32).spawn(tracker.consumer(work)),
        relay(&env.pool, 32).spawn(tracker.consumer(work)),
    ];
    wait_until_delivered(&env.pool, 3).await;
    stop_all(relays).await;

    let deliveries = tracker.deliveries();
    assert_eq!(
        tracker.overlaps(),
        Vec::<String>::new(),
        "all deliveries: {deliveries:?}"
    );
    assert_eq!(
        distinct(&deliveries),
        ids.iter().map(String::as_str).collect()
    );
    assert_eq!(deliveries.len(), 3, "each delivered once: {deliveries:?}");
    assert_eq!(attempts(&env.pool).await, vec!["1"; 3]);
}

/// A relay killed mid-delivery renews nothing more: its message becomes due again and
/// another relay delivers it, as the second attempt. While the first relay was alive,
/// past the timeout, the other relay left the message alone.
async fn a_dead_relays_message_is_delivered_again<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let ids = enqueue(&env.pool, 1).await;
    let tracker = Tracker::default();

    // The first relay's consumer never finishes; the relay runs in a task of its own so
    // the test can kill it.
    let doomed = relay(&env.pool, 32);
    let stuck = tracker.consumer(Duration::from_secs(3600));
    let dying = tokio::spawn(async move { doomed.deliver_once(&stuck).await });
    let deadline = Instant::now() + Duration::from_secs(60);
    while tracker.deliveries().is_empty() {
        assert!(Instant::now() < deadline, "the first relay delivers");
        tokio::time::sleep(POLL).await;
    }
    let survivor = relay(&env.pool, 32).spawn(tracker.consumer(Duration::from_millis(10)));
    // Well past the timeout: the first relay is alive, so its hold is renewed.
    tokio::time::sleep(TIMEOUT * 5 / 2).await;
    assert_eq!(
        tracker.deliveries(),
        [(ids[0].clone(), 1)],
        "no second delivery while the first relay lives"
    );
    assert_eq!(delivered(&env.pool).await, 0);

    dying.abort();
    assert!(
        dying.await.expect_err("killed").is_cancelled(),
        "the first relay died mid-delivery"
    );
    wait_until_delivered(&env.pool, 1).await;
    survivor.stop().await;

    assert_eq!(
        tracker.deliveries(),
        [(ids[0].clone(), 1), (ids[0].clone(), 2)],
        "delivered again after the first relay died, as attempt 2"
    );
    assert_eq!(tracker.overlaps(), Vec::<String>::new());
    assert_eq!(attempts(&env.pool).await, ["2"]);
}

/// The store's own statements, as two relays would make them: relay A's hold runs out
/// unrenewed, relay B takes the message and starts delivering it; every write A then
/// makes about the message is refused and changes nothing, while B's go through.
async fn a_stale_holder_cannot_touch_a_message_another_relay_holds<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let ids = enqueue(&env.pool, 1).await;
    let id = ids[0].as_str();
    let mut conn = env.pool.acquire().await.expect("a connection");
    let short = Duration::from_millis(200);
    let long = Duration::from_secs(600);

    // Given back before its delivery started, a message counts no attempt and is due
    // again at once.
    let taken = DB::take_messages(&mut conn, 8, long, 1)
        .await
        .expect("take");
    assert_eq!(taken.len(), 1);
    assert_eq!(
        DB::release_messages(&mut conn, &ids, 1)
            .await
            .expect("release"),
        1
    );
    assert_eq!(attempts(&env.pool).await, ["0"]);

    let (a, b) = (7, 8);
    let taken = DB::take_messages(&mut conn, 8, short, a)
        .await
        .expect("A takes");
    assert_eq!(taken.len(), 1, "released, so due at once");
    assert_eq!(
        DB::claim_message(&mut conn, id, a, short)
            .await
            .expect("A claims"),
        Some(1)
    );
    // A's hold runs out unrenewed (A hangs); B takes the message and starts delivering.
    tokio::time::sleep(short * 3).await;
    let taken = DB::take_messages(&mut conn, 8, long, b)
        .await
        .expect("B takes");
    assert_eq!(
        taken.iter().map(|row| row.id.as_str()).collect::<Vec<_>>(),
        [id]
    );
    assert_eq!(
        DB::claim_message(&mut conn, id, b, long)
            .await
            .expect("B claims"),
        Some(2)
    );

    // Every write of A's is refused.
    assert_eq!(
        DB::claim_message(&mut conn, id, a, short)
            .await
            .expect("claim"),
        None
    );
    assert!(
        !DB::renew_message(&mut conn, id, a, short)
            .await
            .expect("renew")
    );
    assert!(
        !DB::mark_failed(&mut conn, id, a, Duration::ZERO, "stale")
            .await
            .expect("fail")
    );
    assert_eq!(
        DB::release_messages(&mut conn, &ids, a)
            .await
            .expect("release"),
        0
    );
    assert!(!DB::mark_delivered(&mut conn, id, a).await.expect("deliver"));

    // ... and changed nothing: B still holds the message, hidden from every other take,
    // with B's delivery the second attempt and no error recorded.
    assert_eq!(attempts(&env.pool).await, ["2"]);
    assert_eq!(
        DB::scalar(
            &env.pool,
            "SELECT count(*) FROM idem_outbox WHERE last_error IS NULL AND delivered_at IS NULL"
        )
        .await,
        1
    );
    let taken = DB::take_messages(&mut conn, 8, long, 9)
        .await
        .expect("C takes");
    assert_eq!(taken.len(), 0, "still hidden by B's hold");

    assert!(
        DB::renew_message(&mut conn, id, b, long)
            .await
            .expect("renew")
    );
    assert!(
        DB::mark_delivered(&mut conn, id, b)
            .await
            .expect("B marks it delivered")
    );
    assert_eq!(delivered(&env.pool).await, 1);
    assert!(
        !DB::mark_failed(&mut conn, id, a, Duration::ZERO, "stale")
            .await
            .expect("fail"),
        "a delivered message stays delivered"
    );
    assert_eq!(delivered(&env.pool).await, 1);
    assert_eq!(attempts(&env.pool).await, ["2"]);
}

support::database_tests!(
    two_relays_never_deliver_a_message_at_the_same_time,
    a_consumer_slower_than_the_timeout_keeps_its_message,
    a_dead_relays_message_is_delivered_again,
    a_stale_holder_cannot_touch_a_message_another_relay_holds,
);
