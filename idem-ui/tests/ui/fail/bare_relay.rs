// A bare `Relay` (likewise `Expiry`, `Idem`) names no database with both enabled.
fn deliver(relay: idem::outbox::Relay) {
    let _ = relay;
}

fn main() {}
