//! The consumer inbox on both databases: a message's effect happens once however often
//! it is delivered, a consumer that dies before its commit gets the message processed on
//! redelivery, one that dies after its commit and before its acknowledgement gets the
//! redelivery acknowledged without a second effect, and entries expire with the sweep.
//! Under `ha/pgbouncer.sh` the consumer and the sweep go through PgBouncer.

use crate::support;

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use idem::{Delivery, Inbox};
use sqlx::{AssertSqlSafe, Pool, Postgres, Sqlite, Transaction};
use support::TestBackend;

/// The consumer's side, in SQL: its effect table and the statements on it.
trait Consumer: TestBackend {
    fn create_effects(pool: &Pool<Self>) -> impl Future<Output = ()>;

    /// The consumer's effect, in its transaction.
    fn apply(tx: &mut Transaction<'_, Self>, message_id: &str) -> impl Future<Output = ()>;

    /// Moves every inbox entry's expiry one second into the past.
    fn age_entries(pool: &Pool<Self>) -> impl Future<Output = ()>;

    /// Drops the inbox's table, so that the sweep's inbox batch fails.
    fn drop_inbox(pool: &Pool<Self>) -> impl Future<Output = ()>;
}

macro_rules! consumer {
    ($db:ty, $past:literal) => {
        impl Consumer for $db {
            async fn create_effects(pool: &Pool<Self>) {
                sqlx::query("CREATE TABLE effects (message_id TEXT NOT NULL)")
                    .execute(pool)
                    .await
                    .expect("create the effects table");
            }

            async fn apply(tx: &mut Transaction<'_, Self>, message_id: &str) {
                sqlx::query("INSERT INTO effects (message_id) VALUES ($1)")
                    .bind(message_id)
                    .execute(&mut **tx)
                    .await
                    .expect("the effect");
            }

            async fn age_entries(pool: &Pool<Self>) {
                sqlx::query(AssertSqlSafe(concat!(
                    "UPDATE idem_inbox SET expires_at = ",
                    $past
                )))
                .execute(pool)
                .await
                .expect("age the entries");
            }

            async fn drop_inbox(pool: &Pool<Self>) {
                sqlx::query("DROP TABLE idem_inbox")
                    .execute(pool)
                    .await
                    .expect("drop the inbox");
            }
        }
    };
}

consumer!(Postgres, "now() - interval '1 second'");
consumer!(
    Sqlite,
    "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
);

/// A fresh database with idem's schema and the consumer's effect table.
struct Consumed<DB: Consumer> {
    /// Kept so the database outlives the test.
    _db: DB::Db,
    /// What the consumer and the expiry sweep get: through the pooler when there is one
    /// (ha/pgbouncer.sh), as in an application behind PgBouncer.
    served: Pool<DB>,
    /// For the test's own reads and writes: never through a pooler.
    direct: Pool<DB>,
}

async fn open<DB: Consumer>() -> Consumed<DB> {
    let (db, served) = DB::open().await;
    // idem's migrations through the pooler too: their lock is transaction-level.
    idem::migrate(&served).await.expect("idem's migrations");
    let direct = DB::direct_pool(&db, &served).await;
    DB::create_effects(&direct).await;
    Consumed {
        _db: db,
        served,
        direct,
    }
}

/// One delivery, handled the way the inbox's guide says: record and apply in one
/// transaction, commit, then acknowledge (here: return).
async fn consume<DB: Consumer>(pool: &Pool<DB>, inbox: &Inbox, message_id: &str) -> Delivery {
    let mut tx = pool.begin().await.expect("begin");
    let delivery = inbox.receive(&mut tx, message_id).await.expect("receive");
    if delivery.is_first() {
        DB::apply(&mut tx, message_id).await;
    }
    tx.commit().await.expect("commit");
    delivery
}

async fn effects<DB: Consumer>(pool: &Pool<DB>, message_id: &str) -> i64 {
    DB::scalar(
        pool,
        &format!("SELECT count(*) FROM effects WHERE message_id = '{message_id}'"),
    )
    .await
}

/// Killed after its commit and before the broker's ack: the broker delivers again, the
/// inbox answers `Duplicate`, the consumer acks; the effect happened once.
async fn a_consumer_killed_between_its_effect_and_the_ack_has_the_effect_once<DB: Consumer>() {
    let db = open::<DB>().await;
    let (pool, direct) = (&db.served, &db.direct);
    let inbox = Inbox::new("billing");
    assert_eq!(consume(pool, &inbox, "m-1").await, Delivery::First);
    // (No ack: the consumer died here.) Redelivered, twice.
    assert_eq!(consume(pool, &inbox, "m-1").await, Delivery::Duplicate);
    assert_eq!(consume(pool, &inbox, "m-1").await, Delivery::Duplicate);
    assert_eq!(effects(direct, "m-1").await, 1);
    // Each consumer processes a message once of its own.
    let audit = Inbox::new("audit");
    assert_eq!(consume(pool, &audit, "m-1").await, Delivery::First);
    assert_eq!(effects(direct, "m-1").await, 2);
}

/// Killed before its commit: nothing of the delivery remains, and the redelivery is
/// processed.
async fn a_consumer_killed_before_its_commit_processes_the_redelivery<DB: Consumer>() {
    let db = open::<DB>().await;
    let (pool, direct) = (&db.served, &db.direct);
    let inbox = Inbox::new("billing");
    {
        let mut tx = pool.begin().await.expect("begin");
        assert_eq!(
            inbox.receive(&mut tx, "m-2").await.expect("receive"),
            Delivery::First
        );
        DB::apply(&mut tx, "m-2").await;
        // Dropped without a commit: rolled back, as when the process dies.
    }
    assert_eq!(effects(direct, "m-2").await, 0);
    assert_eq!(
        DB::scalar(direct, "SELECT count(*) FROM idem_inbox").await,
        0,
        "no entry survives the rollback"
    );
    assert_eq!(consume(pool, &inbox, "m-2").await, Delivery::First);
    assert_eq!(effects(direct, "m-2").await, 1);
}

/// Twenty consumers get the same message at once (a broker redelivering to another
/// consumer while the first still works): one effect.
async fn twenty_concurrent_deliveries_have_one_effect<DB: Consumer>() {
    let db = open::<DB>().await;
    let (pool, direct) = (&db.served, &db.direct);
    let inbox = Inbox::new("billing");
    let deliveries = join_all((0..20).map(|_| consume(pool, &inbox, "m-3"))).await;
    let first = deliveries.iter().filter(|d| d.is_first()).count();
    assert_eq!(first, 1, "{deliveries:?}");
    assert_eq!(effects(direct, "m-3").await, 1);
}

/// Entries past their retention are deleted by the expiry sweep, and counted in its
/// report and statistics; a message redelivered after that counts as new. Live entries
/// stay. The sweep runs on the application's pool, through PgBouncer in transaction
/// pooling mode under ha/pgbouncer.sh, where a statement prepared outside a transaction
/// is lost before it runs.
async fn inbox_entries_expire_with_the_sweep<DB: Consumer>() {
    let db = open::<DB>().await;
    let (pool, direct) = (&db.served, &db.direct);
    let inbox = Inbox::new("billing").retention(Duration::from_secs(3 * 24 * 3600));
    for id in ["old-1", "old-2", "old-3"] {
        consume(pool, &inbox, id).await;
    }
    DB::age_entries(direct).await;
    // An expired entry the sweep has not reached yet no longer deduplicates either.
    assert_eq!(consume(pool, &inbox, "old-3").await, Delivery::First);
    consume(pool, &inbox, "live").await;

    let expiry = idem::admin::Expiry::new(pool.clone()).batch_size(1);
    let report = expiry.sweep_once().await.expect("sweep");
    assert_eq!(report.rows_deleted, 2, "{report:?}");
    assert_eq!(report.batches, 2, "batches of one: {report:?}");
    // No key was due: the inbox's batches are the ones timed.
    assert!(report.longest_batch > Duration::ZERO, "{report:?}");
    let stats = expiry.stats();
    assert_eq!((stats.rows_deleted, stats.batches), (2, 2), "{stats:?}");
    assert_eq!(stats.failed_sweeps, 0, "{stats:?}");
    let left = DB::texts(
        direct,
        "SELECT message_id FROM idem_inbox ORDER BY message_id",
    )
    .await;
    assert_eq!(left, ["live", "old-3"]);
    assert_eq!(consume(pool, &inbox, "old-1").await, Delivery::First);
    assert_eq!(consume(pool, &inbox, "live").await, Delivery::Duplicate);
}

/// A sweep whose inbox batch fails is a failed sweep, counted and reported with the
/// error, not a success with a line in the log: that is how a sweep that never deleted
/// an inbox entry (through PgBouncer) went unseen.
async fn a_failed_inbox_batch_fails_the_sweep<DB: Consumer>() {
    let db = open::<DB>().await;
    let inbox = Inbox::new("billing");
    consume(&db.served, &inbox, "m-4").await;
    DB::drop_inbox(&db.direct).await;
    let expiry = idem::admin::Expiry::new(db.served.clone());
    let error = expiry.sweep_once().await.expect_err("no inbox to sweep");
    assert!(
        error.to_string().contains("idem_inbox"),
        "the message names the cause: {error}"
    );
    assert_eq!(error.report().rows_deleted, 0);
    let stats = expiry.stats();
    assert_eq!((stats.failed_sweeps, stats.sweeps), (1, 0), "{stats:?}");
}

/// An id the inbox cannot hold is refused before anything is written.
async fn unusable_ids_are_refused<DB: Consumer>() {
    let db = open::<DB>().await;
    let (pool, direct) = (&db.served, &db.direct);
    let inbox = Inbox::new("billing");
    let mut tx = pool.begin().await.expect("begin");
    for id in [String::new(), "x".repeat(Inbox::MAX_ID_LEN + 1)] {
        let error = inbox.receive(&mut tx, &id).await.unwrap_err();
        assert!(
            matches!(error, sqlx::Error::InvalidArgument(ref m) if m.contains("1 to 255 bytes")),
            "{error}"
        );
    }
    tx.commit().await.expect("commit");
    assert_eq!(
        DB::scalar(direct, "SELECT count(*) FROM idem_inbox").await,
        0
    );
}

/// idem's own relay messages, consumed in another service: the inbox keys on
/// `Message::id`, the same on every delivery. The consumer here fails its first
/// acknowledgement (the relay's handler returns an error after the commit), so the relay
/// delivers the message again.
#[actix_web::test]
async fn relay_messages_are_processed_once_by_their_id() {
    let db = open::<Sqlite>().await;
    let pool = db.served.clone();
    sqlx::query(
        "INSERT INTO idem_outbox (topic, payload, enqueued_at, available_at) VALUES \
         ('receipts', '{\"n\":1}', CAST(unixepoch('subsec') * 1000000 AS INTEGER), \
         CAST(unixepoch('subsec') * 1000000 AS INTEGER))",
    )
    .execute(&pool)
    .await
    .expect("a message in the outbox");

    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let consumer_pool = pool.clone();
    let relay = idem::outbox::Relay::new(pool.clone())
        .poll_interval(Duration::from_millis(20))
        .retry_backoff(Duration::from_millis(20), Duration::from_millis(20))
        .spawn(move |message: idem::outbox::Message| {
            let (pool, sent) = (consumer_pool.clone(), sent.clone());
            async move {
                let inbox = Inbox::new("receipts-consumer");
                let delivery = consume(&pool, &inbox, message.id()).await;
                sent.send((message.attempt(), delivery))
                    .expect("the test listens");
                if message.attempt() == 1 {
                    return Err("the acknowledgement was lost");
                }
                Ok(())
            }
        });
    let first = received.recv().await.expect("a delivery");
    let second = received.recv().await.expect("a redelivery");
    relay.stop().await;
    assert_eq!(
        [first, second],
        [(1, Delivery::First), (2, Delivery::Duplicate)]
    );
    assert_eq!(
        <Sqlite as TestBackend>::scalar(&pool, "SELECT count(*) FROM effects").await,
        1
    );
}

support::database_tests!(
    a_consumer_killed_between_its_effect_and_the_ack_has_the_effect_once,
    a_consumer_killed_before_its_commit_processes_the_redelivery,
    twenty_concurrent_deliveries_have_one_effect,
    inbox_entries_expire_with_the_sweep,
    a_failed_inbox_batch_fails_the_sweep,
    unusable_ids_are_refused,
);
