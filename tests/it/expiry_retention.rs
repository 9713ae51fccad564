//! The sweep deletes completed keys past their retention and nothing else: keys still
//! within their retention stay, and so does every key in progress, however old. A key in
//! progress past its retention with no lease is stranded: counted and kept for an
//! operator, never deleted (its operation may have moved money).

use crate::expiry_support;
use crate::support;

use std::time::Duration;

use expiry_support::{Keys, KeysBackend, Lease};
use idem::admin::Expiry;

async fn expired_keys_go_and_live_or_unfinished_keys_stay<DB: KeysBackend>() {
    let keys = Keys::<DB>::open(2).await;
    // Gone: completed and past retention.
    keys.insert("old", 50, -3600, Lease::None).await;
    keys.insert("just-expired", 5, -1, Lease::None).await;
    // Kept: within retention, or in progress (in a lease or stranded after one).
    keys.insert("lease-over", 10, -3600, Lease::Until(-60))
        .await;
    keys.insert("fresh", 40, 23 * 3600, Lease::None).await;
    keys.insert("held-by-lease", 10, -3600, Lease::Until(300))
        .await;
    keys.insert("young-lease", 3, 3600, Lease::Until(300)).await;

    let expiry = Expiry::new(keys.pool.clone());
    assert_eq!(expiry.count_deletable().await.expect("dry run"), 55);
    assert_eq!(keys.total().await, 118, "a dry run deletes nothing");

    let report = expiry.sweep_once().await.expect("sweep");
    assert_eq!(report.rows_deleted, 55);
    assert_eq!(report.stranded, 10, "the sweep counts what it passed by");
    assert!(report.oldest_stranded.is_some());
    for gone in ["old", "just-expired"] {
        assert_eq!(keys.left(gone).await, 0, "{gone} keys are deleted");
    }
    assert_eq!(
        keys.left("lease-over").await,
        10,
        "in progress past retention: stranded, kept"
    );
    assert_eq!(keys.left("fresh").await, 40);
    assert_eq!(
        keys.left("held-by-lease").await,
        10,
        "in progress within the lease"
    );
    assert_eq!(keys.left("young-lease").await, 3);
    let stats = idem::admin::key_stats(&keys.pool).await.expect("stats");
    assert_eq!(stats.stranded, 10);
    assert_eq!(stats.deletable, 0);

    let again = expiry.sweep_once().await.expect("second sweep");
    assert_eq!(again.rows_deleted, 0, "nothing else is due");

    // Once the lease runs out, the expired in-progress keys are stranded too: kept.
    keys.end_leases("held-by-lease").await;
    let after_lease = expiry.sweep_once().await.expect("sweep after the lease");
    assert_eq!(after_lease.rows_deleted, 0);
    assert_eq!(after_lease.stranded, 20);
    assert_eq!(keys.left("held-by-lease").await, 10);
    assert_eq!(keys.left("young-lease").await, 3, "still within retention");
    assert_eq!(keys.left("fresh").await, 40);
    let listed = idem::admin::stranded_keys(&keys.pool, 100)
        .await
        .expect("list");
    assert_eq!(listed.len(), 20);
    assert!(
        listed
            .iter()
            .all(|key| key.key.starts_with("lease-over-") || key.key.starts_with("held-by-lease-"))
    );
}

support::database_tests!(expired_keys_go_and_live_or_unfinished_keys_stay);

/// Through the example service: a key past its retention is swept, and the client may
/// then use it for a new request, which runs the handler again.
async fn a_swept_key_is_free_for_a_new_request() {
    let env = support::Env::new().await;
    let app = support::service(&env.idem()).await;
    let first = app
        .call(support::post_order(
            support::ALICE,
            "reused-key",
            &support::order_json("widget", 1, 100),
        ))
        .await;
    first.assert_created();

    let expiry = Expiry::new(env.pool.clone());
    assert_eq!(
        expiry.sweep_once().await.expect("sweep").rows_deleted,
        0,
        "within retention"
    );
    assert_eq!(env.keys().await, 1);

    sqlx::query("UPDATE idem_keys SET expires_at = now() - interval '1 second'")
        .execute(&env.pool)
        .await
        .expect("let the retention end");
    assert_eq!(expiry.sweep_once().await.expect("sweep").rows_deleted, 1);
    assert_eq!(env.keys().await, 0);

    // A different body would be a 422 while the key lived; now it is a new request.
    let second = app
        .call(support::post_order(
            support::ALICE,
            "reused-key",
            &support::order_json("gadget", 2, 200),
        ))
        .await;
    second.assert_created();
    assert_eq!(env.orders().await, 2);
    let expires_in: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM expires_at - now())::float8 FROM idem_keys")
            .fetch_one(&env.pool)
            .await
            .expect("the new key's expiry");
    let day = Duration::from_secs(24 * 3600).as_secs_f64();
    assert!(
        (day - 60.0..=day).contains(&expires_in),
        "the new key lives for the handler's 24h retention, not {expires_in} s"
    );
}

support::both_frameworks!(
    #[tokio::test]
    a_swept_key_is_free_for_a_new_request,
);
