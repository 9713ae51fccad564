//! The `#[idempotent]` attribute of [idem](https://docs.rs/idem). Use it through the
//! `idem` crate, which also provides the runtime the generated code calls.
//!
//! The work happens in stages, one module each: `parse` reads the attribute's arguments
//! keeping every span, `syntax` reads what the handler's own syntax says (route
//! attributes, parameter roles), `validate` holds the rules for values (durations, safe
//! methods), `check` checks everything and resolves every fact into a `model` (collecting
//! all errors in `errors`), and `expand` (actix-web) or `expand_axum` turns the model into tokens, with what both emit in `tokens`.
//! `#[idem::exempt]` changes no handler, and has its few stages in `exempt`.

use proc_macro::TokenStream;
use quote::ToTokens;

mod above;
mod axum_rules;
mod backend;
mod check;
mod errors;
mod exempt;
mod expand;
mod expand_axum;
mod model;
mod parse;
mod syntax;
mod tokens;
mod validate;

/// Makes an actix-web handler idempotent: see the `idem` crate for the guide.
///
/// ```ignore
/// #[post("/orders")]
/// #[idempotent(scope = account, retention = "24h")]
/// async fn create_order(account: Account, tx: idem::Tx<'_, sqlx::Postgres>, body: web::Json<NewOrder>)
///     -> Result<HttpResponse, AppError> { .. }
/// ```
///
/// The arguments (`scope`, `retention`, `lease`, `crate`, `key`, `backend`) are in one
/// table, the guide's
/// [attribute arguments](https://docs.rs/idem/latest/idem/guide/attributes/)
/// (`docs/guide/attributes.md` in the repository).
///
/// The phased form:
///
/// ```ignore
/// #[post("/payments")]
/// #[idempotent(scope = account, retention = "24h", lease = "30s")]
/// async fn create_payment(account: Account, phases: idem::Phases<sqlx::Postgres>, body: web::Json<NewPayment>)
///     -> Result<HttpResponse, AppError> {
///     let payment: Payment = phases.run("payment_created", async |mut tx| { .. }).await?;
///     ..
/// }
/// ```
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(model::Framework::Actix, args, item)
}

/// Makes an axum 0.8 handler idempotent: `#[idem::axum::idempotent(..)]` (feature `axum`
/// of the `idem` crate), with the same arguments as `#[idempotent]`, and one of its own:
/// `state = <type>` (default: every state the extractors accept), the router's state,
/// so that each extractor is checked against it and a parameter that is none is an
/// error at its type rather than at the router, e.g. `state = AppState` (or a generic
/// type as written, `state = AppState<Shop>`).
///
/// The handler keeps axum's rules for extractors: each parameter but `Tx` or `Phases`
/// is an extractor, the last one may read the body (`FromRequest`), the others read the
/// head (`FromRequestParts`). Its name becomes a value to register on the router, e.g.
/// `Router::new().route("/orders", post(create_order)).layer(Extension(idem))`.
///
/// ```ignore
/// #[idem::axum::idempotent(scope = account, retention = "24h")]
/// async fn create_order(account: Account, tx: idem::Tx<'_, sqlx::Postgres>,
///     Json(order): Json<NewOrder>) -> Result<(StatusCode, Json<Order>), AppError> { .. }
/// ```
#[proc_macro_attribute]
pub fn idempotent_axum(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(model::Framework::Axum, args, item)
}

/// Marks a handler that mutates and is safe to repeat without an idempotency key, for
/// the reason given: a PUT by a client-chosen id, an upsert on a natural key, a DELETE
/// whose repeat answers 404. Use it as `idem::exempt`, on actix-web and axum handlers
/// alike.
///
/// The handler is left exactly as written. The exemption is recorded in the registry
/// (`idem::registry::exemptions()`, and `idem::registry::report()`) beside the
/// idempotent endpoints, with the route's method and path when the attribute is written
/// above an actix-web route attribute. A missing or empty reason is a compile error.
/// `crate = <path>` after the reason, as for `#[idempotent]`, names the path idem is
/// reached by: `#[keys::exempt("PUT by id", crate = keys)]`.
///
/// ```ignore
/// #[idem::exempt("PUT by client-chosen id: a repeat writes the same cart")]
/// #[put("/carts/{id}")]
/// async fn put_cart(id: web::Path<Uuid>, cart: web::Json<Cart>) -> HttpResponse { .. }
/// ```
#[proc_macro_attribute]
pub fn exempt(args: TokenStream, item: TokenStream) -> TokenStream {
    exempt::expand(args.into(), item.into()).into()
}

/// The one entry point: the framework is the only fact the attribute's path adds.
fn entry(framework: model::Framework, args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    // Anything but a function is emitted untouched beside the error, so editors keep
    // working on it.
    let Ok(func) = syn::parse2::<syn::ItemFn>(item.clone()) else {
        let error = syn::Error::new(
            proc_macro2::Span::call_site(),
            format!(
                "{} goes on an `async fn` request handler",
                framework.attribute()
            ),
        )
        .into_compile_error();
        return quote::quote!(#item #error).into();
    };
    let mut errors = errors::Errors::default();
    let args = parse::parse(args.into(), &mut errors);
    check::check(framework, args, func, errors)
        .into_token_stream()
        .into()
}
