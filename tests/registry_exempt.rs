//! `#[idem::exempt("reason")]` and the running service's report: exempt handlers of both
//! frameworks are listed with their reason (and their route where the attribute could see
//! it), and `idem::registry::report()` gives one section per endpoint, each mechanism
//! told apart.

use actix_web::{HttpResponse, delete, post, put, route, web};
use axum::extract::Path;

/// Above the route attribute: the exemption sees the route.
#[idem::exempt("PUT by client-chosen id: a repeat writes the same cart")]
#[put("/carts/{id}")]
async fn put_cart(id: web::Path<i64>) -> HttpResponse {
    HttpResponse::Ok().body(id.into_inner().to_string())
}

/// Below it: actix-web's attribute nests the function, and the exemption reads the
/// route back from this file.
#[delete("/carts/{id}")]
#[idem::exempt("a repeated DELETE answers 404")]
async fn delete_cart(id: web::Path<i64>) -> HttpResponse {
    let _ = id;
    HttpResponse::NoContent().finish()
}

/// Several methods: no one route to record.
#[idem::exempt("an upsert on the profile's natural key")]
#[route("/profiles/{id}", method = "PUT", method = "PATCH")]
async fn upsert_profile(id: web::Path<i64>) -> HttpResponse {
    let _ = id;
    HttpResponse::NoContent().finish()
}

/// An axum handler: a plain async fn, unchanged.
#[idem::exempt("PUT by client-chosen id")]
async fn put_tag(Path(id): Path<i64>) -> String {
    id.to_string()
}

/// Below the route attribute, as the guide writes it: the route read back from this file.
#[post("/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres, retention = "48h")]
async fn create_order(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

#[idem::idempotent(scope = account, lease = "30s")]
#[post("/payments")]
async fn create_payment(
    account: idem::UnverifiedScope<web::Path<i64>>,
    phases: idem::Phases<sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, phases);
    HttpResponse::Created().finish()
}

#[idem::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
#[post("/webhooks/provider")]
async fn provider_webhook(
    sender: idem::SignedWebhook,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    let _ = (sender, tx);
    HttpResponse::Ok().finish()
}

/// The policy of an `IdempotencyLayer`, listed once the layer is built.
static REFUNDS: idem::Policy =
    idem::Policy::new("create_refund", "shop::refunds", "account", 86_400);

#[derive(Clone)]
struct Account;

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        "1".into()
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Account {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}

/// The sections of `report()` whose heading names `endpoint`, one string each.
fn sections(endpoint: &str) -> Vec<String> {
    let heading = format!("## Idempotency for {endpoint}\n");
    idem::registry::report()
        .iter()
        .map(ToString::to_string)
        .filter(|section| section.starts_with(&heading))
        .collect()
}

#[test]
fn exemptions_are_listed_with_their_reason_and_route() {
    // Referenced so the linker keeps this file's handlers.
    let _ = (put_cart, delete_cart, upsert_profile, put_tag);
    let exemptions: Vec<_> = idem::registry::exemptions()
        .into_iter()
        .map(|exemption| {
            (
                exemption.module_path(),
                exemption.handler(),
                exemption.reason(),
                exemption.route(),
            )
        })
        .collect();
    assert_eq!(
        exemptions,
        [
            (
                "registry_exempt",
                "delete_cart",
                "a repeated DELETE answers 404",
                Some(("DELETE", "/carts/{id}"))
            ),
            (
                "registry_exempt",
                "put_cart",
                "PUT by client-chosen id: a repeat writes the same cart",
                Some(("PUT", "/carts/{id}"))
            ),
            (
                "registry_exempt",
                "put_tag",
                "PUT by client-chosen id",
                None
            ),
            (
                "registry_exempt",
                "upsert_profile",
                "an upsert on the profile's natural key",
                None
            ),
        ]
    );
}

#[test]
fn the_report_has_one_section_per_endpoint_by_mechanism() {
    let _ = (create_order, create_payment, provider_webhook);
    let _ = idem::axum::IdempotencyLayer::<sqlx::Postgres, Account>::new(&REFUNDS);

    let report = idem::registry::report();
    let endpoints: Vec<_> = report
        .iter()
        .map(|endpoint| (endpoint.method.as_str(), endpoint.path.as_str()))
        .collect();
    // By path, then method; a handler whose route was not seen has no method.
    assert_eq!(
        endpoints,
        [
            ("DELETE", "/carts/{id}"),
            ("PUT", "/carts/{id}"),
            ("POST", "/orders"),
            ("POST", "/payments"),
            ("POST", "/webhooks/provider"),
            ("", "registry_exempt::put_tag"),
            ("", "registry_exempt::upsert_profile"),
            ("", "shop::refunds::create_refund"),
        ]
    );

    assert_eq!(
        sections("PUT /carts/{id}"),
        ["## Idempotency for PUT /carts/{id}\n\
          - Mechanism: exempt: PUT by client-chosen id: a repeat writes the same cart\n\
          - Tests: not known from this source (run `idem audit --format report`)\n"]
    );
    assert_eq!(
        sections("POST /orders"),
        ["## Idempotency for POST /orders\n\
          - Mechanism: Idempotency-Key table (single transaction)\n\
          - Key scope and retention: account, 48h\n\
          - Fingerprint: method, path, query parameters, decoded body (canonical JSON, form fields, or bytes by its Content-Type)\n\
          - Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing\n\
          - Downstream keys: not known from this source\n\
          - Tests: not known from this source (run `idem audit --format report`)\n"]
    );
    let lines = |endpoint: &str| -> Vec<String> {
        sections(endpoint)
            .concat()
            .lines()
            .take(3)
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        lines("POST /payments"),
        [
            "## Idempotency for POST /payments",
            "- Mechanism: phased with recovery points",
            "- Key scope and retention: account, 24h",
        ]
    );
    assert_eq!(
        lines("POST /webhooks/provider"),
        [
            "## Idempotency for POST /webhooks/provider",
            "- Mechanism: webhook id",
            "- Key scope and retention: sender, 120h",
        ]
    );
    assert_eq!(
        lines("shop::refunds::create_refund"),
        [
            "## Idempotency for shop::refunds::create_refund",
            "- Mechanism: Idempotency-Key table (IdempotencyLayer)",
            "- Key scope and retention: account, 24h",
        ]
    );

    // One Markdown document, sections in the same order.
    let markdown = idem::report::render(&report);
    assert!(markdown.starts_with("## Idempotency for DELETE /carts/{id}\n"));
    assert_eq!(
        markdown.matches("## Idempotency for ").count(),
        report.len()
    );
}
