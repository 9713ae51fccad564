// Integer, UUID and string caller ids all scope keys: from authentication middleware
// (`ReqData`), or from the path when it was authorized before idem runs.
use actix_web::{App, HttpResponse, delete, patch, web};

#[patch("/by-uuid/{id}")]
#[idem::idempotent(scope = id)]
async fn by_uuid(id: web::ReqData<uuid::Uuid>, _tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = id;
    HttpResponse::NoContent().finish()
}

#[delete("/by-name/{name}")]
#[idem::idempotent(scope = name, backend = sqlx::Postgres)]
async fn by_name(name: idem::UnverifiedScope<web::Path<String>>) -> HttpResponse {
    let _ = name;
    HttpResponse::NoContent().finish()
}

fn main() {
    let _ = App::new().service(by_uuid).service(by_name);
}
