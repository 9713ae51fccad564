#[idem::idempotent(scope = account)]
struct CreateOrder;

fn main() {}
