//! The protocol as a tower `Layer`, for applications that put cross-cutting behaviour on
//! the router rather than on the handler: [`IdempotencyLayer`] runs the claim, lends the
//! transaction to the route's handler through the request (its [`Tx`] extractor), and
//! records the handler's answer with its writes. The same core drives it as drives
//! `#[idem::axum::idempotent]`; only how the handler gets its transaction differs.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::axum::extract::{FromRequestParts, Request};
use ::axum::response::{IntoResponse, Response};
use http::Method;
use http::request::Parts;
use tower_layer::Layer;
use tower_service::Service;

use super::framework::problem_response;
use super::prepare::prepare;
use crate::protocol::policy::Policy;
use crate::protocol::problem::ProblemKind;
use crate::protocol::scope::ScopeKey;
use crate::protocol::tx::{LentTx, Tx};
use crate::store::Backend;

/// A tower [`Layer`] that makes the routes under it idempotent on database `DB`, scoped by
/// the extractor `Sc`, with the retention (and, for a webhook, the key source) of
/// `policy`: the same protocol as `#[idem::axum::idempotent]`, and the same `Idem` from
/// the request's extensions (`Router::layer(Extension(idem))`).
///
/// For each request of an unsafe method (`POST`, `PUT`, `PATCH`, `DELETE`; the others
/// pass through untouched) it buffers the body (413 past `max_request_bytes`), runs `Sc`
/// on the request's head (its rejection is the answer, before any key is read), reads the
/// key and fingerprints the exact bytes received, claims the key in a new transaction
/// (answering a replay, 409 or 422 instead when the key is held), and calls the route with
/// the transaction lent to it: the handler takes it as [`Tx`], an extractor. Its answer is
/// stored and committed with its writes; a 5xx, a transient 4xx, a panic or a storage error
/// rolls both back.
///
/// Where it differs from the attribute, and when to use which (the guide's
/// [axum page](https://docs.rs/idem/latest/idem/guide/axum/#axum-macro-or-layer)):
///
/// - the handler's own extractors run after the claim, inside the transaction: a body its
///   `Json` rejects is that key's answer (stored, and replayed to the same request) rather
///   than an answer that uses no key. Authenticate in `Sc` or in a middleware in front;
/// - `Sc` runs without the router's state (`FromRequestParts<()>`): an identity put in
///   the extensions by a middleware (`Extension<T>`), a header extractor of your own,
///   [`SignedWebhook`](crate::SignedWebhook), or [`UnverifiedScope`](crate::UnverifiedScope)
///   of a `Path` with `route_layer`. A scope that needs the state does not compile;
/// - the phased form (`lease`) needs the attribute: a policy with a lease is refused when
///   the layer is built;
/// - the handler must not keep its `Tx` after it answered (in a spawned task, in a
///   streaming body): the request is then answered 500 `transaction-ended` and rolled back.
///
/// The policy is a `static` the application declares; its `handler` and `scope` name the
/// route in logs, metrics and the OpenAPI document. Building the layer adds it to
/// [`policies`](crate::policies), so `IdempotencyDocs` (feature `openapi`) documents the
/// operation whose `operationId` is its `handler`, as it does an attribute's.
///
/// ```
/// use axum::routing::post;
/// use axum::{Extension, Router};
/// use idem_runtime::{IdempotencyLayer, Policy, Tx};
///
/// #[derive(Clone)]
/// struct Account(i64);
///
/// impl idem_runtime::ScopeKey for Account {
///     fn scope_key(&self) -> std::borrow::Cow<'_, str> {
///         self.0.to_string().into()
///     }
/// }
///
/// static CREATE_ORDER: Policy = Policy::new("create_order", module_path!(), "account", 86_400);
///
/// async fn create_order(Extension(account): Extension<Account>, mut tx: Tx<'static, sqlx::Sqlite>) -> String {
///     sqlx::query("INSERT INTO orders (account_id) VALUES ($1)")
///         .bind(account.0)
///         .execute(&mut *tx)
///         .await
///         .map_or_else(|error| error.to_string(), |_| "created".to_owned())
/// }
///
/// # fn app(idem: idem_runtime::Idem<sqlx::Sqlite>) -> Router {
/// Router::new()
///     .route(
///         "/orders",
///         post(create_order)
///             .route_layer(IdempotencyLayer::<sqlx::Sqlite, Extension<Account>>::new(&CREATE_ORDER)),
///     )
///     // Outside the idempotency layer: the identity middleware would go here too.
///     .layer(Extension(idem))
/// # }
/// ```
pub struct IdempotencyLayer<DB, Sc> {
    policy: &'static Policy,
    types: PhantomData<fn() -> (DB, Sc)>,
}

impl<DB: Backend, Sc> IdempotencyLayer<DB, Sc> {
    /// The layer for the routes of `policy`.
    ///
    /// # Panics
    ///
    /// When `policy` has a lease: the phased form runs only as `#[idem::axum::idempotent]`.
    /// When `Sc` is a signed webhook's sender ([`SignedWebhook`](crate::SignedWebhook))
    /// and the policy's key is not what the sender signed: the `webhook-id` header
    /// (`.with_key(KeySource::Header("webhook-id"))`) or a field of the body
    /// (`KeySource::Json`). A key from any other header is not signed, and a captured
    /// delivery resent under fresh keys would run the handler once per key:
    ///
    /// ```should_panic
    /// use idem_runtime::{IdempotencyLayer, Policy, SignedWebhook};
    ///
    /// static EVENTS: Policy = Policy::new("provider_event", module_path!(), "sender", 86_400);
    /// let _ = IdempotencyLayer::<sqlx::Sqlite, SignedWebhook>::new(&EVENTS);
    /// ```
    pub fn new(policy: &'static Policy) -> Self
    where
        Sc: ScopeKey,
    {
        assert!(
            policy.lease().is_none(),
            "IdempotencyLayer runs the single-transaction form, and the policy of `{}` has a \
             lease: write the phased handler with #[idem::axum::idempotent(.., lease = ..)]",
            policy.handler()
        );
        assert!(
            !Sc::SIGNED_SENDER || crate::protocol::webhook::key_is_signed(policy),
            "the policy of `{}` is scoped by a signed webhook but takes its key from {}, which \
             the sender did not sign: anyone holding one captured delivery could resend it \
             under fresh keys and run the handler each time; declare the policy with \
             `.with_key(KeySource::Header(\"webhook-id\"))`, or `KeySource::Json(..)` for an \
             id in the signed body",
            policy.handler(),
            policy.key_source().map_or_else(
                || "the Idempotency-Key header".to_owned(),
                |key| key.to_string()
            ),
        );
        crate::registry::register(policy);
        Self {
            policy,
            types: PhantomData,
        }
    }

    /// The policy the layer enforces.
    pub fn policy(&self) -> &'static Policy {
        self.policy
    }
}

impl<DB, Sc> Clone for IdempotencyLayer<DB, Sc> {
    fn clone(&self) -> Self {
        Self {
            policy: self.policy,
            types: PhantomData,
        }
    }
}

impl<DB, Sc> fmt::Debug for IdempotencyLayer<DB, Sc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("handler", &self.policy.handler())
            .finish_non_exhaustive()
    }
}

impl<S, DB, Sc> Layer<S> for IdempotencyLayer<DB, Sc> {
    type Service = IdempotentService<S, DB, Sc>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotentService {
            inner,
            policy: self.policy,
            types: PhantomData,
        }
    }
}

/// The service [`IdempotencyLayer`] wraps a route in.
pub struct IdempotentService<S, DB, Sc> {
    inner: S,
    policy: &'static Policy,
    types: PhantomData<fn() -> (DB, Sc)>,
}

impl<S: Clone, DB, Sc> Clone for IdempotentService<S, DB, Sc> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            policy: self.policy,
            types: PhantomData,
        }
    }
}

impl<S, DB, Sc> fmt::Debug for IdempotentService<S, DB, Sc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotentService")
            .field("handler", &self.policy.handler())
            .finish_non_exhaustive()
    }
}

/// One impl per database rather than one generic over `DB: Backend`: the store's futures
/// are `Send` for each database, which a generic impl cannot name.
macro_rules! service_for {
    ($db:ty) => {
        impl<S, Sc> Service<Request> for IdempotentService<S, $db, Sc>
        where
            S: Service<Request, Error = Infallible> + Clone + Send + 'static,
            S::Response: IntoResponse,
            S::Future: Send,
            Sc: FromRequestParts<()> + ScopeKey + Send + 'static,
        {
            type Response = Response;
            type Error = Infallible;
            type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

            fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, req: Request) -> Self::Future {
                // The service that was polled ready serves this request; its clone the next.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(handle::<S, $db, Sc>(self.policy, inner, req))
            }
        }
    };
}

#[cfg(feature = "postgres")]
service_for!(sqlx::Postgres);
#[cfg(feature = "sqlite")]
service_for!(sqlx::Sqlite);

async fn handle<S, DB, Sc>(
    policy: &'static Policy,
    mut inner: S,
    req: Request,
) -> Result<Response, Infallible>
where
    S: Service<Request, Error = Infallible> + Send,
    S::Response: IntoResponse,
    S::Future: Send,
    DB: Backend,
    Sc: FromRequestParts<()> + ScopeKey + Send,
{
    // Reads, and methods idempotent by definition, need no key.
    if !matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return inner.call(req).await.map(IntoResponse::into_response);
    }
    let prepared = match prepare::<DB>(policy, req).await {
        Ok(prepared) => prepared,
        Err(response) => return Ok(response),
    };
    let mut extraction = prepared.extraction();
    let scope = match Sc::from_request_parts(extraction.parts_mut(), &()).await {
        Ok(scope) => crate::protocol::scope::namespaced(&scope.scope_key(), Sc::SIGNED_SENDER),
        Err(rejection) => return Ok(rejection.into_response()),
    };
    let response = prepared
        .run_lent(&scope, async move |slot: LentTx<DB>| {
            let mut req = extraction.into_request();
            req.extensions_mut().insert(slot);
            match inner.call(req).await {
                Ok(response) => response.into_response(),
                Err(never) => match never {},
            }
        })
        .await;
    Ok(response)
}

/// The transaction [`IdempotencyLayer`] opened for the request, as an extractor of the
/// route's handler: write `tx: idem::Tx<'static, sqlx::Postgres>` (any lifetime; the
/// transaction is lent, not borrowed). One `Tx` per request; it must not outlive the
/// handler. Without the layer it answers 500 `not-configured`. (An
/// `#[idem::axum::idempotent]` handler's `Tx` is the attribute's, not this extractor.)
impl<S, DB> FromRequestParts<S> for Tx<'_, DB>
where
    S: Send + Sync,
    DB: Backend,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Some(slot) = parts.extensions.get::<LentTx<DB>>() else {
            tracing::error!(
                database = <DB as sqlx::Database>::NAME,
                "the handler takes idem::Tx, and no IdempotencyLayer of this database is in \
                 front of it: add one with route_layer, or make the handler \
                 #[idem::axum::idempotent]"
            );
            return Err(not_configured(
                "the server has no idempotency transaction for this request; this is a \
                 server bug",
            ));
        };
        slot.lend().ok_or_else(|| {
            tracing::error!("the handler takes idem::Tx twice; take it once");
            not_configured(
                "the server asked for the request's transaction twice; this is a server bug",
            )
        })
    }
}

fn not_configured(detail: &str) -> Response {
    problem_response(ProblemKind::NotConfigured.problem(detail))
}
