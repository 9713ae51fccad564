//! With actix-web's request decompression on (its default features), or on axum (which
//! decodes nothing itself: idem's adapter decodes for the extractors), a body sent
//! compressed (`Content-Encoding: gzip`, `deflate`, `br` or `zstd`) is the same request as
//! the same body sent plain: idem fingerprints the decoded content that the extractors
//! read, the extractors decode it once, the limit applies to the decoded size, and a
//! stream that does not decode is a 400 before anything is stored.

mod support;

use std::io::Write;

use actix_web::{HttpResponse, web};
use support::TestRequest;
use support::app::{Account, NewOrder, Store};
use support::{ALICE, Env, TestBackend, by_database, order_json, post_order};

/// Records that it ran and answers with the body its `Bytes` extractor saw.
#[idem::idempotent(scope = account, retention = "24h")]
async fn echo<DB: Store>(account: Account, body: web::Bytes, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let order: NewOrder =
        serde_json::from_str(r#"{"item":"echo","quantity":1,"amount_cents":0}"#).unwrap();
    DB::insert_order(&mut tx, account.id(), &order)
        .await
        .expect("insert");
    HttpResponse::Created().body(body)
}

/// `echo` on axum, once per database.
macro_rules! axum_echo {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::{Account, NewOrder, Store};
            use axum::body::Bytes;
            use axum::http::StatusCode;

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn echo(
                account: Account,
                tx: idem::Tx<'_, $db>,
                body: Bytes,
            ) -> (StatusCode, Bytes) {
                let order: NewOrder =
                    serde_json::from_str(r#"{"item":"echo","quantity":1,"amount_cents":0}"#)
                        .unwrap();
                <$db as Store>::insert_order(&mut tx, account.id(), &order)
                    .await
                    .expect("insert");
                (StatusCode::CREATED, body)
            }
        }
    };
}

axum_echo!(on_postgres, sqlx::Postgres);
axum_echo!(on_sqlite, sqlx::Sqlite);

/// The example's application plus `POST /test/echo`, on the test's framework.
async fn echo_app<DB: TestBackend>(env: &Env<DB>) -> support::TestApp {
    support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/test/echo", web::post().to(echo::<DB>));
        },
        || {
            let echo = by_database::<DB, _>(
                || axum::routing::post(on_postgres::echo),
                || axum::routing::post(on_sqlite::echo),
            );
            axum::Router::new().route("/test/echo", echo)
        },
    )
    .await
}

const ENCODINGS: [&str; 4] = ["gzip", "deflate", "br", "zstd"];

/// `plain` compressed as `Content-Encoding: encoding` says.
fn compress(encoding: &str, plain: &[u8]) -> Vec<u8> {
    match encoding {
        "gzip" => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(plain).unwrap();
            encoder.finish().unwrap()
        }
        // HTTP's `deflate` is the zlib format (RFC 9110, 8.4.1.2).
        "deflate" => {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(plain).unwrap();
            encoder.finish().unwrap()
        }
        "br" => {
            let mut out = Vec::new();
            {
                let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                encoder.write_all(plain).unwrap();
            }
            out
        }
        "zstd" => zstd::encode_all(plain, 3).unwrap(),
        other => panic!("no compressor for {other}"),
    }
}

/// `POST uri` as Alice with a JSON body, compressed with `encoding` unless it is `None`.
fn post_encoded(uri: &str, key: &str, encoding: Option<&str>, plain: &[u8]) -> TestRequest {
    let req = TestRequest::post()
        .uri(uri)
        .insert_header(("x-account-id", ALICE.to_string()))
        .insert_header(("idempotency-key", key))
        .insert_header(("content-type", "application/json"));
    match encoding {
        Some(encoding) => req
            .insert_header(("content-encoding", encoding))
            .set_payload(compress(encoding, plain)),
        None => req.set_payload(plain.to_vec()),
    }
}

async fn a_compressed_order_then_the_same_order_plain_is_one_order<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 2, 1250);
    for encoding in ENCODINGS {
        let key = format!("order-{encoding}");
        let first = app
            .call(post_encoded(
                "/orders",
                &key,
                Some(encoding),
                body.as_bytes(),
            ))
            .await;
        first.assert_created();
        let again = app
            .call(post_encoded("/orders", &key, None, body.as_bytes()))
            .await;
        again.assert_replay_of(&first);
        // And compressed again, after the plain one.
        let third = app
            .call(post_encoded(
                "/orders",
                &key,
                Some(encoding),
                body.as_bytes(),
            ))
            .await;
        third.assert_replay_of(&first);
    }
    assert_eq!(env.orders().await, ENCODINGS.len() as i64);
}

async fn the_plain_order_first_then_compressed_is_a_replay<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);
    let first = app.call(post_order(ALICE, "plain-first", &body)).await;
    first.assert_created();
    for encoding in ENCODINGS {
        app.call(post_encoded(
            "/orders",
            "plain-first",
            Some(encoding),
            body.as_bytes(),
        ))
        .await
        .assert_replay_of(&first);
    }
    assert_eq!(env.orders().await, 1);
}

async fn a_different_body_compressed_is_still_a_mismatch<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    app.call(post_order(ALICE, "changed", &order_json("tea", 1, 100)))
        .await
        .assert_created();
    let changed = order_json("tea", 2, 100);
    let problem = app
        .call(post_encoded(
            "/orders",
            "changed",
            Some("gzip"),
            changed.as_bytes(),
        ))
        .await
        .assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body");
    assert_eq!(env.orders().await, 1);
}

async fn extractors_see_the_body_decoded_exactly_once<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = echo_app(&env).await;
    let body = br#"{"note":"once"}"#;
    for encoding in ENCODINGS {
        let reply = app
            .call(post_encoded(
                "/test/echo",
                &format!("echo-{encoding}"),
                Some(encoding),
                body,
            ))
            .await;
        assert_eq!(reply.status, 201, "{encoding}: {:?}", reply.body);
        assert_eq!(&reply.body[..], body, "{encoding}");
    }
}

async fn a_stream_that_does_not_decode_is_400_before_the_claim<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = echo_app(&env).await;
    let plain = order_json("tea", 1, 100);
    for encoding in ENCODINGS {
        // Plain bytes that claim to be compressed, and a compressed body cut short.
        let truncated = compress(encoding, plain.as_bytes());
        let truncated = &truncated[..truncated.len() / 2];
        for body in [plain.as_bytes(), truncated] {
            for uri in ["/orders", "/test/echo"] {
                let req = TestRequest::post()
                    .uri(uri)
                    .insert_header(("x-account-id", ALICE.to_string()))
                    .insert_header(("idempotency-key", "bad-stream"))
                    .insert_header(("content-type", "application/json"))
                    .insert_header(("content-encoding", encoding))
                    .set_payload(body.to_vec());
                let problem = app
                    .call(req)
                    .await
                    .assert_idem_problem(400, "request-body-encoding-invalid");
                let detail = problem["detail"].as_str().unwrap_or_default();
                assert!(detail.contains(encoding), "{encoding} {uri}: {detail}");
            }
        }
    }
    assert_eq!((env.keys().await, env.orders().await), (0, 0));
    // The key was not consumed.
    app.call(post_order(ALICE, "bad-stream", &plain))
        .await
        .assert_created();
}

/// A brotli body whose stream declares a 16 MiB window, the most brotli allows, on an
/// endpoint whose limit needs far less: refused with 400 before anything is decoded (the
/// decoder would allocate the window first), and the key stays free. The same order with
/// the encoder's default window (4 MiB) is created.
async fn a_brotli_window_past_what_the_limit_needs_is_400_before_the_claim<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let plain = order_json("tea", 1, 100);
    let brotli = |lgwin| {
        let mut out = Vec::new();
        {
            let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 5, lgwin);
            encoder.write_all(plain.as_bytes()).unwrap();
        }
        out
    };
    let send = |body: Vec<u8>| {
        TestRequest::post()
            .uri("/orders")
            .insert_header(("x-account-id", ALICE.to_string()))
            .insert_header(("idempotency-key", "wide-window"))
            .insert_header(("content-type", "application/json"))
            .insert_header(("content-encoding", "br"))
            .set_payload(body)
    };
    let problem = app
        .call(send(brotli(24)))
        .await
        .assert_idem_problem(400, "request-body-encoding-invalid");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("window of 16777200 bytes"), "{detail}");
    assert_eq!((env.keys().await, env.orders().await), (0, 0));
    app.call(send(brotli(22))).await.assert_created();
}

async fn the_limit_applies_to_the_decoded_size<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    // 16 MiB of spaces after a small order: it compresses to well under the 2 MiB limit
    // but decodes to 8 times it.
    let mut plain = order_json("tea", 1, 100).into_bytes();
    plain.resize(16 << 20, b' ');
    for encoding in ENCODINGS {
        let compressed = compress(encoding, &plain);
        assert!(
            compressed.len() < 2 << 20,
            "{encoding}: {}",
            compressed.len()
        );
        let req = TestRequest::post()
            .uri("/orders")
            .insert_header(("x-account-id", ALICE.to_string()))
            .insert_header(("idempotency-key", "bomb"))
            .insert_header(("content-type", "application/json"))
            .insert_header(("content-encoding", encoding))
            .set_payload(compressed);
        app.call(req)
            .await
            .assert_idem_problem(413, "request-body-too-large");
    }
    assert_eq!((env.keys().await, env.orders().await), (0, 0));
}

async fn identity_and_unknown_encodings_are_the_bytes_as_sent<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);
    let first = app.call(post_order(ALICE, "identity", &body)).await;
    first.assert_created();
    let req = post_order(ALICE, "identity", &body).insert_header(("content-encoding", "identity"));
    app.call(req).await.assert_replay_of(&first);
}

/// The example application behind a real HTTP server, and a real client: the body
/// crosses a socket as the client compressed it.
async fn over_http_a_compressed_order_and_the_plain_one_are_one_order<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let (base, server) = support::serve_with_twin(&env.idem(), |_| {}, axum::Router::new()).await;

    let client = reqwest::Client::new();
    let body = order_json("green tea", 2, 1299);
    let send = |key: &str, encoding: Option<&str>| {
        let mut req = client
            .post(format!("{base}/orders"))
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", key)
            .header("content-type", "application/json");
        let payload = match encoding {
            Some(encoding) => {
                req = req.header("content-encoding", encoding);
                compress(encoding, body.as_bytes())
            }
            None => body.clone().into_bytes(),
        };
        req.body(payload).send()
    };
    for encoding in ENCODINGS {
        let key = format!("http-{encoding}");
        let first = send(&key, Some(encoding)).await.expect("a response");
        assert_eq!(first.status(), 201, "{encoding}");
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first_body = first.bytes().await.expect("a body");
        let again = send(&key, None).await.expect("a response");
        assert_eq!(again.status(), 201, "{encoding}");
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{encoding}");
        assert_eq!(
            again.bytes().await.expect("a body"),
            first_body,
            "{encoding}"
        );
    }
    assert_eq!(env.orders().await, ENCODINGS.len() as i64);
    server.stop().await;
}

support::backend_tests!(
    a_compressed_order_then_the_same_order_plain_is_one_order,
    the_plain_order_first_then_compressed_is_a_replay,
    a_different_body_compressed_is_still_a_mismatch,
    the_limit_applies_to_the_decoded_size,
    identity_and_unknown_encodings_are_the_bytes_as_sent,
    over_http_a_compressed_order_and_the_plain_one_are_one_order,
    extractors_see_the_body_decoded_exactly_once,
    a_stream_that_does_not_decode_is_400_before_the_claim,
    a_brotli_window_past_what_the_limit_needs_is_400_before_the_claim,
);
