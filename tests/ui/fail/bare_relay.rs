// A bare `Relay` (likewise `Expiry`, `Idem`) names no database with both enabled.
fn relay(pool: sqlx::PgPool) -> idem::outbox::Relay {
    idem::outbox::Relay::new(pool)
}

fn main() {}
