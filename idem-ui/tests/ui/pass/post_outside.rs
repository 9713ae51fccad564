// `#[post]` outside `#[idempotent]`: the transaction, a JSON body and a custom scope type.
use std::borrow::Cow;

use actix_web::{App, HttpResponse, post, web};
use idem::idempotent;

struct Account(i64);

impl actix_web::FromRequest for Account {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(_: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(Ok(Account(1)))
    }
}

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> Cow<'_, str> {
        self.0.to_string().into()
    }
}

#[derive(serde::Deserialize)]
struct NewOrder {
    item: String,
}

/// Creates an order.
#[post("/orders")]
#[idempotent(scope = account, retention = "24h")]
async fn create_order(
    account: Account,
    tx: idem::Tx<'_, sqlx::Postgres>,
    body: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    sqlx::query("INSERT INTO orders (account_id, item) VALUES ($1, $2)")
        .bind(account.0)
        .bind(&body.item)
        .execute(&mut *tx)
        .await
        .map_err(actix_web::error::ErrorInternalServerError)?;
    Ok(HttpResponse::Created().finish())
}

fn main() {
    let _ = App::new().service(create_order);
}
