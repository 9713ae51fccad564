//! The `#[idempotent]` attribute of [idem](https://docs.rs/idem). Use it through the
//! `idem` crate, which also provides the runtime the generated code calls.
//!
//! The work happens in three small stages: `parse` reads the attribute's arguments
//! keeping every span, `model` checks them against the handler and builds a checked
//! model, and `expand` turns the model into code.

use proc_macro::TokenStream;

mod expand;
mod model;
mod parse;

/// Makes an actix-web handler idempotent: see the `idem` crate for the guide.
///
/// ```ignore
/// #[post("/orders")]
/// #[idempotent(scope = account, retention = "24h")]
/// async fn create_order(account: Account, tx: idem::Tx, body: web::Json<NewOrder>)
///     -> Result<HttpResponse, AppError> { .. }
/// ```
///
/// Arguments:
/// - `scope = <parameter>` (required): the parameter that identifies the caller; its
///   type implements `idem::ScopeKey`.
/// - `retention = "<duration>"` (default `"24h"`, at least 24 hours): how long a key
///   is kept and replayed, e.g. `"36h"`, `"7d"`.
/// - `lease = "<duration>"` (the phased form; required with an `idem::Phases`
///   parameter, refused without one; 1 second to the retention): how long an attempt
///   holds the key before a retry may take it over, e.g. `"30s"`.
/// - `key = header("<name>")` or `key = json("<field>")` (default: the `Idempotency-Key`
///   header): a webhook event's id as the key, from a request header or a field of the
///   JSON body (a member's name, or a JSON Pointer starting with `/`).
///
/// The phased form:
///
/// ```ignore
/// #[post("/payments")]
/// #[idempotent(scope = account, retention = "24h", lease = "30s")]
/// async fn create_payment(account: Account, phases: idem::Phases, body: web::Json<NewPayment>)
///     -> Result<HttpResponse, AppError> {
///     let payment: Payment = phases.run("payment_created", async |mut tx| { .. }).await?;
///     ..
/// }
/// ```
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}
