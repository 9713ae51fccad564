//! The example's `POST /payments` (phased, calling its provider over HTTP) verified by
//! `idem::testing` through the running binary, on actix-web and axum, PostgreSQL and
//! SQLite: concurrency, replay, mismatch, missing key and expiry, counted by the
//! provider's charges.
//!
//! The binary's crash hook aborts the whole process (`IDEM_EXAMPLE_CRASH_AFTER`), which
//! no in-process check can survive, so its crash-resume is `phased_crash_resume.rs`'s
//! test; the harness's own crash-resume runs on an in-process payment in `testing.rs`.

mod phased_support;
mod support;

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use idem::testing::{Endpoint, Target};
use phased_support::{Example, count, payment_json};
use support::{ALICE, TestBackend};

/// The example binary at `base`, over HTTP.
struct Served {
    client: reqwest::Client,
    base: String,
}

impl Target<()> for Served {
    fn send(&self, request: http::Request<Bytes>) -> LocalBoxFuture<'_, http::Response<Bytes>> {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let reply = self
                .client
                .request(parts.method, format!("{}{}", self.base, parts.uri))
                .headers(parts.headers)
                .body(body)
                .send()
                .await
                .expect("the example answers");
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = reply.status();
            *response.headers_mut() = reply.headers().clone();
            *response.body_mut() = reply.bytes().await.expect("read the answer");
            response
        })
    }
}

async fn the_example_payments_pass_the_checks<DB: TestBackend>() {
    let (db, pool) = DB::open().await;
    let example = Example::start(&DB::url(&db), None).await;
    let served = Served {
        client: reqwest::Client::new(),
        base: example.base.clone(),
    };
    let charges = pool.clone();
    let endpoint = Endpoint::post("/payments")
        .header("x-account-id", &ALICE.to_string())
        .body("application/json", payment_json(4_200, "EUR"))
        .mismatch_body(payment_json(4_300, "EUR"))
        .phased()
        .effect(move || {
            let pool = charges.clone();
            async move { count(&pool, "provider_charges").await }
        })
        .store(&pool);
    endpoint.concurrency(&served).await.unwrap();
    endpoint.replay(&served).await.unwrap();
    endpoint.mismatch(&served).await.unwrap();
    endpoint.missing_key(&served).await.unwrap();
    endpoint.expiry(&served).await.unwrap();
    example.stop().await;
}

support::backend_tests!(the_example_payments_pass_the_checks);
