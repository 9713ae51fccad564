//! What axum asks of a handler that actix-web does not: no route attribute, no generics,
//! and a body extractor only as the last extractor.

use quote::quote;
use syn::{Attribute, Ident, ItemFn, Type};

use crate::errors::Errors;
use crate::model::Param;
use crate::syntax::Role;

/// A route attribute on an axum handler, which axum registers on its `Router`.
pub(crate) fn axum_route_attribute(attr: &Attribute, name: &Ident) -> syn::Error {
    let method = attr
        .path()
        .segments
        .last()
        .map_or_else(String::new, |segment| segment.ident.to_string());
    let registered = match method.as_str() {
        "route" | "routes" => format!("`axum::routing::post({name})`"),
        _ => format!("`axum::routing::{method}({name})`"),
    };
    syn::Error::new_spanned(
        attr,
        format!(
            "`#[{method}]` is an actix-web route attribute, and this is an axum handler \
             (`#[idem::axum::idempotent]`): remove it and register {registered} with \
             `Router::route`"
        ),
    )
}

/// The extractors that read the request's body, by the last segment of their path: axum
/// runs them only as a handler's last extractor (`FromRequest`), and the others through
/// `FromRequestParts`. Others are reported by the compiler, at the router.
/// (`SignedWebhook` is not one: it verifies the body idem buffered from the head.)
const BODY_EXTRACTORS: [&str; 8] = [
    "Json",
    "Form",
    "String",
    "Bytes",
    "Body",
    "Request",
    "RawForm",
    "Multipart",
];

/// What axum requires of a handler that the generated one cannot offer: generics (the
/// handler is a unit struct) and a body extractor before the last extractor.
pub(crate) fn axum_rules(func: &ItemFn, params: &[Param], errors: &mut Errors) {
    let generics = &func.sig.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            generics,
            format!(
                "an axum handler made idempotent is a value registered on the router, so it \
                 cannot be generic: remove the generics of `{}` and name concrete types",
                func.sig.ident
            ),
        ));
    }
    let extractors: Vec<&Param> = params
        .iter()
        .filter(|param| param.role == Role::Extractor)
        .collect();
    let Some((last, before)) = extractors.split_last() else {
        return;
    };
    for param in before {
        let Type::Path(path) = &param.ty else {
            continue;
        };
        let Some(segment) = path.path.segments.last() else {
            continue;
        };
        if BODY_EXTRACTORS.iter().any(|name| segment.ident == name) {
            let last_ty = &last.ty;
            errors.push(syn::Error::new_spanned(
                &param.ty,
                format!(
                    "`{}` reads the request body, which axum hands only to the last extractor: \
                     move this parameter after `{}`",
                    segment.ident,
                    quote!(#last_ty).to_string().replace(' ', "")
                ),
            ));
        }
    }
}
