// Outside `#[idempotent]` the same rule holds: with both databases enabled, a helper's
// bare `idem::Tx` names none.
fn insert_order(tx: &mut idem::Tx<'_>) {
    let _ = tx;
}

fn main() {}
