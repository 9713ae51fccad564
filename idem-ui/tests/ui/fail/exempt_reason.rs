// A reason is required, and is a non-empty string literal.
use actix_web::{HttpResponse, put};

#[idem::exempt]
#[put("/carts/{id}")]
async fn missing() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

#[idem::exempt("  ")]
async fn empty() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

const REASON: &str = "PUT by id";

#[idem::exempt(REASON)]
async fn not_a_literal() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

#[idem::exempt("PUT by id", "and idempotent")]
async fn two_reasons() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

fn main() {
    let _ = (missing, empty, not_a_literal, two_reasons);
}
