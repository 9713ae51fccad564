// Integer, UUID and string caller ids all scope keys.
use actix_web::{App, HttpResponse, delete, patch, web};

#[patch("/by-uuid/{id}")]
#[idem::idempotent(scope = id)]
async fn by_uuid(id: web::Path<uuid::Uuid>, _tx: idem::Tx) -> HttpResponse {
    HttpResponse::NoContent().finish()
}

#[delete("/by-name/{name}")]
#[idem::idempotent(scope = name)]
async fn by_name(name: web::Path<String>) -> HttpResponse {
    HttpResponse::NoContent().finish()
}

fn main() {
    let _ = App::new().service(by_uuid).service(by_name);
}
