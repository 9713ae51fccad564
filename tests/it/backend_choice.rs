//! The database of a handler that takes neither `Tx` nor `Phases`: with both database
//! features on (as here), `backend = ..` names it, and the handler uses the `Idem` of
//! that database. Before, such a handler always looked for PostgreSQL's `Idem`, so in a
//! SQLite application it answered every request `500 not-configured`.

use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, post, test, web};

#[post("/accounts/{account}/notes")]
#[idem::idempotent(scope = account, backend = sqlx::Sqlite)]
async fn create_note(account: idem::UnverifiedScope<web::Path<i64>>, note: String) -> HttpResponse {
    HttpResponse::Created().body(format!("note for {}: {note}", **account))
}

#[actix_web::test]
async fn a_handler_without_a_transaction_uses_the_idem_its_backend_names() {
    let db = idem_testkit::TestSqlite::new();
    let pool = db.pool(2).await;
    idem::migrate(&pool).await.expect("idem's tables");
    let app = test::init_service(
        App::new()
            .app_data(idem::Idem::new(pool.clone()))
            .service(create_note),
    )
    .await;
    let request = || {
        test::TestRequest::post()
            .uri("/accounts/7/notes")
            .insert_header(("Idempotency-Key", "first-note"))
            .set_payload("tea")
            .to_request()
    };

    let first = test::call_service(&app, request()).await;
    assert_eq!(
        first.status(),
        StatusCode::CREATED,
        "the SQLite Idem was found"
    );
    assert_eq!(test::read_body(first).await, "note for 7: tea");

    let again = test::call_service(&app, request()).await;
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|value| value.as_bytes()),
        Some(&b"true"[..]),
        "the key was stored in SQLite and the retry replayed from it"
    );
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_keys")
        .fetch_one(&pool)
        .await
        .expect("count the keys");
    assert_eq!(keys, 1);
}
