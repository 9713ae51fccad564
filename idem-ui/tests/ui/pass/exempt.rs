// `#[idem::exempt]` leaves the handler as written: above or below actix-web's route
// attributes, on a route of several methods, and on an axum handler.
use actix_web::{App, HttpResponse, delete, put, route, web};
use axum::routing;

#[idem::exempt("PUT by client-chosen id")]
#[put("/carts/{id}")]
async fn put_cart(id: web::Path<i64>, body: web::Json<serde_json::Value>) -> HttpResponse {
    let _ = (id, body);
    HttpResponse::NoContent().finish()
}

/// Documented; the docs stay on the handler actix-web registers.
#[delete("/carts/{id}")]
#[idem::exempt("a repeated DELETE answers 404, and the first one's effect is the only one")]
async fn delete_cart(id: web::Path<i64>) -> HttpResponse {
    let _ = id;
    HttpResponse::NoContent().finish()
}

#[idem::exempt("an upsert on the profile's natural key")]
#[route("/profiles/{id}", method = "PUT", method = "PATCH")]
pub async fn upsert_profile(id: web::Path<i64>) -> HttpResponse {
    let _ = id;
    HttpResponse::NoContent().finish()
}

#[idem::exempt("PUT by client-chosen id")]
async fn put_tag(axum::extract::Path(id): axum::extract::Path<i64>) -> String {
    id.to_string()
}

fn main() {
    let _ = App::new()
        .service(put_cart)
        .service(delete_cart)
        .service(upsert_profile);
    let _: axum::Router = axum::Router::new().route("/tags/{id}", routing::put(put_tag));
    assert_eq!(idem::registry::exemptions().len(), 4);
}
