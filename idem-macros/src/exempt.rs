//! `#[idem::exempt("reason")]`: a handler safe to repeat without a key. It changes nothing
//! of the handler, so its stages are small enough for one module: read the reason, read
//! the route from the handler's attributes (as `#[idempotent]` does), and emit the
//! function as written beside its entry in the registry.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Expr, Ident, ItemFn, LitStr, Token};

use crate::above;
use crate::errors::Errors;
use crate::parse::crate_path;
use crate::syntax::{self, AttrKind};

/// How to write the attribute, for every message about its reason.
const EXAMPLE: &str = "e.g. `#[idem::exempt(\"PUT by client-chosen id\")]`";

/// The function as written (never re-printed, so nothing of it changes), then either
/// its registration or the errors.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let (reason, krate) = arguments(args, &mut errors);
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => Some(func),
        Err(_) => {
            errors.push(syn::Error::new(
                Span::call_site(),
                "`#[idem::exempt]` goes on a request handler: an actix-web or axum handler \
                 function",
            ));
            None
        }
    };
    if let Some(func) = &func {
        for attr in &func.attrs {
            if let AttrKind::Idempotent = syntax::classify(attr) {
                errors.push(beside_idempotent(attr, &func.sig.ident));
            }
        }
    }
    let registration = match (errors.finish(), func, reason) {
        (None, Some(func), Some(reason)) => registration(&func, &reason, &krate),
        (error, _, _) => error.map_or_else(TokenStream::new, |error| error.to_compile_error()),
    };
    quote! {
        #item
        #registration
    }
}

/// The one reason, a non-empty string literal (`None` after reporting why it is not),
/// and `crate = <path>` after it, as `#[idempotent]` takes it (default `::idem`).
fn arguments(args: TokenStream, errors: &mut Errors) -> (Option<LitStr>, syn::Path) {
    let mut krate = syn::parse_quote!(::idem);
    let missing = || format!("`exempt` needs a reason: say why a repeat is safe, {EXAMPLE}");
    if args.is_empty() {
        // The attribute itself: there is no argument to point at.
        errors.push(syn::Error::new(Span::call_site(), missing()));
        return (None, krate);
    }
    let parsed = (|input: ParseStream<'_>| {
        let lookahead = input.lookahead1();
        if !lookahead.peek(LitStr) {
            let rest: TokenStream = input.parse()?;
            return Err(syn::Error::new_spanned(
                rest,
                format!(
                    "`exempt` takes its reason as a string literal: write it in quotes, {EXAMPLE}"
                ),
            ));
        }
        let reason: LitStr = input.parse()?;
        // A trailing comma is what rustfmt leaves after a long argument.
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
        if input.peek(Token![crate]) && input.peek2(Token![=]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            krate = crate_path(&input.parse::<Expr>()?)?;
            if input.peek(Token![,]) {
                input.parse::<Token![,]>()?;
            }
        }
        if !input.is_empty() {
            let rest: TokenStream = input.parse()?;
            return Err(syn::Error::new_spanned(
                rest,
                "`exempt` takes one reason: remove this, or say it in the reason's text",
            ));
        }
        Ok(reason)
    })
    .parse2(args);
    let reason = match parsed {
        Ok(reason) if reason.value().trim().is_empty() => {
            errors.push(syn::Error::new(reason.span(), missing()));
            None
        }
        Ok(reason) => Some(reason),
        Err(error) => {
            errors.push(error);
            None
        }
    };
    (reason, krate)
}

/// The handler's entry in the registry, with the route of the one route attribute below
/// this one or above it (read back from the source file, as `#[idempotent]` does), if
/// there is such a route.
fn registration(func: &ItemFn, reason: &LitStr, krate: &syn::Path) -> TokenStream {
    let handler = func.sig.ident.to_string();
    let mut routes = syntax::routes(&func.attrs);
    routes.extend(syntax::routes(&above::attributes_above(func, |kind| {
        matches!(kind, AttrKind::Exempt)
    })));
    let with_route =
        syntax::single_route(&routes).map(|(method, path)| quote!(.with_route(#method, #path)));
    quote! {
        #krate::__private::inventory::submit! {
            #krate::__private::Exempted(
                #krate::__private::Exemption::new(#handler, ::core::module_path!(), #reason)
                    #with_route
            )
        }
    }
}

/// `#[idempotent]` and `#[idem::exempt]` on one handler: `attr` is the other attribute,
/// below the one expanding.
pub(crate) fn beside_idempotent(attr: &Attribute, handler: &Ident) -> syn::Error {
    syn::Error::new_spanned(
        attr,
        format!(
            "`{handler}` is both `#[idempotent]` and `#[idem::exempt]`: an idempotent handler \
             needs no exemption, and an exempt one takes no key; remove one of them"
        ),
    )
}
