//! What the database holds at the end, read once, and its business rows assigned to the
//! operations that made them.

use std::collections::{BTreeSet, HashMap};

use crate::workload::{Form, Op};

/// A row of `idem_keys`: scope, key, state, response status and body, generation and
/// `created_at` in microseconds.
pub(super) type KeyRow = (
    String,
    String,
    String,
    Option<i16>,
    Option<Vec<u8>>,
    i64,
    i64,
);

/// A row of `payments`: id, account, amount, state, provider charge id.
pub(super) type PaymentRow = (i64, i64, i64, String, Option<String>);

/// A row of `provider_charges`: id, provider key, amount, requests.
pub(super) type ChargeRow = (i64, String, i64, i32);

/// The keys in progress, and the completed ones within their retention: the records a
/// retry would find.
pub(super) async fn retained_keys(url: &str) -> Result<BTreeSet<(String, String)>, String> {
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| format!("the checker cannot connect: {e}"))?;
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT scope, idem_key FROM idem_keys WHERE state = 'started' OR expires_at > now()",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("read idem_keys: {e}"))?;
    pool.close().await;
    Ok(keys.into_iter().collect())
}

/// What the database holds at the end.
pub(super) struct Database {
    /// By (scope, key).
    pub(super) keys: HashMap<(String, String), KeyRow>,
    /// id, account, item.
    pub(super) orders: Vec<(i64, i64, String)>,
    pub(super) payments: Vec<PaymentRow>,
    pub(super) charges: Vec<ChargeRow>,
    /// Receipts per payment id.
    pub(super) receipts: HashMap<i64, i64>,
}

impl Database {
    pub(super) async fn read(url: &str) -> Result<Self, String> {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("the checker cannot connect: {e}"))?;
        let read = |what: &str, e: sqlx::Error| format!("read {what}: {e}");
        let orders = sqlx::query_as("SELECT id, account_id, item FROM orders ORDER BY id")
            .fetch_all(&pool)
            .await
            .map_err(|e| read("orders", e))?;
        let keys: Vec<KeyRow> = sqlx::query_as(
            "SELECT scope, idem_key, state, response_status, response_body, generation, \
                    (extract(epoch FROM created_at) * 1000000)::bigint \
               FROM idem_keys",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("idem_keys", e))?;
        let payments = sqlx::query_as(
            "SELECT id, account_id, amount_cents, state, provider_charge_id FROM payments \
              ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("payments", e))?;
        let charges = sqlx::query_as(
            "SELECT id, provider_key, amount_cents, requests FROM provider_charges ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| read("provider_charges", e))?;
        let receipts: Vec<(i64, i64)> =
            sqlx::query_as("SELECT payment_id, count(*) FROM receipts GROUP BY payment_id")
                .fetch_all(&pool)
                .await
                .map_err(|e| read("receipts", e))?;
        pool.close().await;
        Ok(Self {
            keys: keys
                .into_iter()
                .map(|row| ((row.0.clone(), row.1.clone()), row))
                .collect(),
            orders,
            payments,
            charges,
            receipts: receipts.into_iter().collect(),
        })
    }
}

/// The business rows of each operation: orders name their key (the item), payments and
/// charges their body (each payment body has an amount of its own).
#[derive(Default)]
pub(super) struct Effects<'a> {
    pub(super) orders: Vec<i64>,
    pub(super) payments: Vec<&'a PaymentRow>,
    pub(super) charges: Vec<&'a ChargeRow>,
}

impl<'a> Effects<'a> {
    /// The rows of each operation, by index; a row no operation sent is a violation.
    pub(super) fn of(
        ops: &[Op],
        db: &'a Database,
        violations: &mut Vec<String>,
    ) -> Vec<Effects<'a>> {
        let mut of_op: Vec<Effects<'a>> = ops.iter().map(|_| Effects::default()).collect();
        let mut order_owner = HashMap::new();
        let mut amount_owner = HashMap::new();
        for (index, op) in ops.iter().enumerate() {
            match op.form {
                Form::Order => {
                    order_owner.insert((op.account, op.key.as_str()), index);
                }
                Form::Payment => {
                    for body in &op.bodies {
                        let amount = serde_json::from_str::<serde_json::Value>(body)
                            .ok()
                            .and_then(|v| v["amount_cents"].as_i64());
                        if let Some(amount) = amount {
                            amount_owner.insert(amount, index);
                        }
                    }
                }
            }
        }
        for (id, account, item) in &db.orders {
            match order_owner.get(&(*account, item.as_str())) {
                Some(&index) => of_op[index].orders.push(*id),
                None => violations.push(format!(
                    "order {id} (account {account}, {item}): no client sent this order"
                )),
            }
        }
        for payment in &db.payments {
            let (id, account, amount, ..) = payment;
            match amount_owner.get(amount) {
                Some(&index) if ops[index].account == *account => {
                    of_op[index].payments.push(payment);
                }
                _ => violations.push(format!(
                    "payment {id} (account {account}, {amount} cents): no client of this \
                     account sent this payment"
                )),
            }
        }
        for charge in &db.charges {
            let (id, provider_key, amount, _) = charge;
            match amount_owner.get(amount) {
                Some(&index) => of_op[index].charges.push(charge),
                None => violations.push(format!(
                    "provider charge {id} ({provider_key}, {amount} cents): no payment was \
                     sent for it"
                )),
            }
        }
        of_op
    }
}
