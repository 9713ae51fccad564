//! OpenAPI for axum routes (features `openapi` and `axum`): a document built by
//! utoipa-axum's `OpenApiRouter` and `routes!`, passed through `IdempotencyDocs`, documents
//! an `#[idem::axum::idempotent]` operation exactly as it documents the actix-web form of
//! the same policy: the key header, the published policy (`x-idempotency`), the
//! description, `Idempotent-Replayed` and the problem responses. Single-transaction,
//! phased and webhook forms, and a route behind `IdempotencyLayer`.

use std::borrow::Cow;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use idem::openapi::IdempotencyDocs;
use serde_json::Value;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

/// The caller, for the axum handlers.
#[derive(Debug, Clone, Copy)]
struct Account(i64);

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Owned(self.0.to_string())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Account {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        Ok(Self(1))
    }
}

mod axum_form {
    use super::*;

    #[utoipa::path(
        post,
        path = "/accounts/{account}/widgets",
        responses(
            (status = 201, description = "The widget was created"),
            (status = 422, description = "The widget is not valid"),
            (status = 503, description = "Try again later"),
        )
    )]
    #[idem::axum::idempotent(scope = account, retention = "36h")]
    pub(crate) async fn axum_widget(
        account: Account,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> StatusCode {
        let _ = (account, &mut *tx);
        StatusCode::CREATED
    }

    #[utoipa::path(post, path = "/payments", responses((status = 201, description = "Paid")))]
    #[idem::axum::idempotent(scope = account, retention = "2d", lease = "30s")]
    pub(crate) async fn axum_payment(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> StatusCode {
        let _ = (account, phases);
        StatusCode::CREATED
    }

    #[utoipa::path(post, path = "/webhooks/provider", responses((status = 200, description = "Recorded")))]
    #[idem::axum::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
    pub(crate) async fn axum_event(
        sender: idem::SignedWebhook,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> StatusCode {
        let _ = (sender, &mut *tx);
        StatusCode::OK
    }

    /// A plain handler behind `IdempotencyLayer`.
    #[utoipa::path(post, path = "/refunds", responses((status = 202, description = "Accepted")))]
    pub(crate) async fn layered_refund(tx: idem::Tx<'static, sqlx::Postgres>) -> StatusCode {
        let _ = tx;
        StatusCode::ACCEPTED
    }

    pub(crate) static LAYERED_REFUND: idem::Policy =
        idem::Policy::new("layered_refund", module_path!(), "account", 7 * 86_400);
}

mod actix_form {
    use actix_web::{HttpResponse, post, web};

    #[utoipa::path(
        post,
        path = "/accounts/{account}/widgets",
        responses(
            (status = 201, description = "The widget was created"),
            (status = 422, description = "The widget is not valid"),
            (status = 503, description = "Try again later"),
        )
    )]
    #[idem::idempotent(scope = account, retention = "36h")]
    #[post("/accounts/{account}/widgets")]
    pub(crate) async fn actix_widget(
        account: web::ReqData<i64>,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> HttpResponse {
        let _ = (account, tx);
        HttpResponse::Created().finish()
    }

    #[utoipa::path(post, path = "/payments", responses((status = 201, description = "Paid")))]
    #[idem::idempotent(scope = account, retention = "2d", lease = "30s")]
    #[post("/payments")]
    pub(crate) async fn actix_payment(
        account: web::ReqData<i64>,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> HttpResponse {
        let _ = (account, phases);
        HttpResponse::Created().finish()
    }

    #[utoipa::path(post, path = "/webhooks/provider", responses((status = 200, description = "Recorded")))]
    #[idem::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
    #[post("/webhooks/provider")]
    pub(crate) async fn actix_event(
        sender: idem::SignedWebhook,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> HttpResponse {
        let _ = (sender, tx);
        HttpResponse::Ok().finish()
    }

    #[utoipa::path(post, path = "/refunds", responses((status = 202, description = "Accepted")))]
    #[idem::idempotent(scope = account, retention = "7d")]
    #[post("/refunds")]
    pub(crate) async fn actix_refund(
        account: web::ReqData<i64>,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> HttpResponse {
        let _ = (account, tx);
        HttpResponse::Accepted().finish()
    }
}

#[derive(OpenApi)]
#[openapi(
    paths(
        actix_form::actix_widget,
        actix_form::actix_payment,
        actix_form::actix_event,
        actix_form::actix_refund
    ),
    modifiers(&IdempotencyDocs)
)]
struct ActixDoc;

/// The axum application's document, as utoipa-axum builds it with its router; idem's
/// part is added to the finished document (a modifier on the document handed to
/// `OpenApiRouter::with_openapi` would run before the routes are in it).
fn axum_document() -> Value {
    let layer =
        idem::axum::IdempotencyLayer::<sqlx::Postgres, Account>::new(&axum_form::LAYERED_REFUND);
    let (_router, mut api) = OpenApiRouter::<()>::new()
        .routes(routes!(axum_form::axum_widget))
        .routes(routes!(axum_form::axum_payment))
        .routes(routes!(axum_form::axum_event))
        .routes(routes!(axum_form::layered_refund).map(|route| route.route_layer(layer)))
        .split_for_parts();
    IdempotencyDocs.modify(&mut api);
    serde_json::to_value(&api).expect("JSON")
}

fn actix_document() -> Value {
    serde_json::to_value(ActixDoc::openapi()).expect("JSON")
}

/// What idem contributes to an operation: the key parameter, the policy, the description
/// and the responses (the handler's own, with idem's headers and problems).
fn idempotency_parts(document: &Value, path: &str) -> Value {
    let operation = &document["paths"][path]["post"];
    assert!(operation.is_object(), "{path} is documented: {document}");
    serde_json::json!({
        "parameters": operation["parameters"],
        "x-idempotency": operation["x-idempotency"],
        "description": operation["description"],
        "responses": operation["responses"],
    })
}

#[test]
fn axum_operations_are_documented_as_the_actix_form_is() {
    let axum = axum_document();
    let actix = actix_document();
    for path in [
        "/accounts/{account}/widgets",
        "/payments",
        "/webhooks/provider",
        "/refunds",
    ] {
        let axum_parts = idempotency_parts(&axum, path);
        assert!(
            axum_parts["x-idempotency"].is_object(),
            "{path} is documented as idempotent: {axum_parts:#}"
        );
        assert_eq!(axum_parts, idempotency_parts(&actix, path), "{path}");
    }
    // The forms' own marks survive: the lease, the webhook's key header.
    assert_eq!(
        axum["paths"]["/payments"]["post"]["x-idempotency"]["lease_ms"],
        30_000
    );
    assert_eq!(
        axum["paths"]["/webhooks/provider"]["post"]["x-idempotency"]["header"],
        "webhook-id"
    );
    // And the problem schema the responses refer to.
    assert_eq!(
        axum["components"]["schemas"]["IdempotencyProblem"],
        actix["components"]["schemas"]["IdempotencyProblem"]
    );
}
