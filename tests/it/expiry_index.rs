//! The sweep finds expired rows through the `expires_at` index and deletes them by
//! primary key: a batch costs what its size costs, not what the table's size does.

use crate::expiry_support;

use expiry_support::{Keys, Lease};
use idem::admin::Expiry;

fn assert_uses_the_indexes(plan: &str) {
    assert!(
        plan.contains("Index Scan using idem_keys_expires_at on idem_keys"),
        "the batch is chosen through the expires_at index:\n{plan}"
    );
    assert!(
        plan.contains("Index Scan using idem_keys_pkey on idem_keys k"),
        "the batch is deleted by primary key:\n{plan}"
    );
    assert!(
        !plan.contains("Seq Scan"),
        "no sequential scan of the key table:\n{plan}"
    );
    assert!(!plan.contains("ctid"), "{plan}");
}

#[tokio::test]
async fn the_batch_plan_uses_the_expires_at_index_and_the_primary_key() {
    let keys = Keys::new(2).await;
    // A realistic table: most keys within retention, a few percent due.
    keys.insert("live", 97_000, 12 * 3600, Lease::None).await;
    keys.insert("due", 3_000, -60, Lease::None).await;
    keys.analyze().await;
    let expiry = Expiry::new(keys.pool.clone());
    let plan = expiry.explain().await.expect("explain");
    assert_uses_the_indexes(&plan);
    assert_eq!(keys.total().await, 100_000, "EXPLAIN deletes nothing");

    // Every row due: a full scan looks cheapest to the planner's cost model here, and
    // the sweep must still go by index.
    sqlx::query("UPDATE idem_keys SET expires_at = now() - interval '1 minute'")
        .execute(&keys.pool)
        .await
        .expect("expire all");
    keys.analyze().await;
    assert_uses_the_indexes(&expiry.explain().await.expect("explain"));
    assert_uses_the_indexes(
        &expiry
            .clone()
            .batch_size(5000)
            .explain()
            .await
            .expect("explain"),
    );
}
