//! idem's claim is written for READ COMMITTED: a duplicate that waited for the first
//! request's row reads it with a fresh snapshot. Connections whose default isolation is
//! stricter (`default_transaction_isolation`, set on the server or, as here, per
//! connection) still give one effect and 409s or replays, never a 503 from a
//! serialization failure: idem begins its transactions at READ COMMITTED itself.

use crate::support;

use std::str::FromStr;
use std::time::Duration;

use futures_util::future::join_all;
use idem_testkit::TestDb;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use support::{ALICE, order_json, post_order};

async fn duplicates_on_connections_defaulting_to(isolation: &str) {
    let db = TestDb::new().await;
    let options = PgConnectOptions::from_str(db.url())
        .expect("the test database's URL parses")
        .options([("default_transaction_isolation", isolation)]);
    let pool = PgPoolOptions::new()
        .max_connections(support::POOL_SIZE)
        .connect_with(options)
        .await
        .expect("connect");
    let default: String = sqlx::query_scalar("SHOW default_transaction_isolation")
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(default, isolation, "the pool's connections default to it");
    support::app::setup(&pool).await.expect("migrations apply");
    let idem = idem::Idem::new(pool.clone()).claim_wait(Duration::from_secs(5));
    let app = support::service(&idem).await;
    let body = order_json("tea", 1, 100);

    // The duplicates queue on the first's row and read it once it committed: where the
    // snapshot predates that commit, the insert fails to serialize.
    let replies = join_all(
        (0..10).map(|_| app.call(post_order(ALICE, "same", &body).uri("/orders?delay_ms=200"))),
    )
    .await;
    let mut created = 0;
    for reply in &replies {
        match reply.status {
            201 if !reply.replayed() => created += 1,
            201 => {}
            _ => {
                reply.assert_idem_problem(409, "request-in-progress");
            }
        }
    }
    assert_eq!(created, 1, "one original answer");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(orders, 1, "one effect");
}

async fn duplicates_under_serializable_connections_give_one_effect_never_503() {
    duplicates_on_connections_defaulting_to("serializable").await;
}

async fn duplicates_under_repeatable_read_connections_give_one_effect_never_503() {
    duplicates_on_connections_defaulting_to("repeatable read").await;
}

support::both_frameworks!(
    #[actix_web::test]
    duplicates_under_serializable_connections_give_one_effect_never_503,
    #[actix_web::test]
    duplicates_under_repeatable_read_connections_give_one_effect_never_503,
);
