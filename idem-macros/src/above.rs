//! The attributes written above `#[idempotent]`, read back from the handler's source file.
//!
//! A route attribute written above `#[idempotent]` (the order the README teaches) expands
//! first and keeps the handler for itself: `#[idempotent]` then receives the function
//! without it, and could not tell a `#[head]` handler from a `#[post]` one. The compiler
//! does tell where the function is written, so the attribute reads that file and finds
//! the function there, with every attribute in the order the user wrote them.
//!
//! Where the source cannot be read (a handler written by another macro, or an editor's
//! expansion that has no file), nothing is found and the handler is checked as before:
//! the check can only add errors, never remove one.

use proc_macro2::Span;
use quote::ToTokens;
use syn::{Attribute, Item, ItemFn};

use crate::syntax::{self, AttrKind};

/// The attributes the user wrote above the first attribute of `func` that `is_this` knows
/// as the one expanding (`#[idempotent]`, `#[idem::exempt]`), in order; empty when the
/// source file does not show them.
pub(crate) fn attributes_above(func: &ItemFn, is_this: fn(&AttrKind) -> bool) -> Vec<Attribute> {
    let Some(text) = source_file(func.sig.ident.span()) else {
        return Vec::new();
    };
    let Ok(file) = syn::parse_file(&text) else {
        return Vec::new();
    };
    // The function as it arrived, to tell it from others of the same name in the file:
    // its signature and body are passed on token for token by the route attributes.
    let wanted = (
        func.sig.to_token_stream().to_string(),
        func.block.to_token_stream().to_string(),
    );
    let mut found: Vec<Vec<Attribute>> = Vec::new();
    visit_items(&file.items, &mut |candidate| {
        if candidate.sig.ident == func.sig.ident
            && candidate.sig.to_token_stream().to_string() == wanted.0
            && candidate.block.to_token_stream().to_string() == wanted.1
        {
            found.push(above(&candidate.attrs, is_this));
        }
    });
    // Two functions alike token for token (an actix-web and an axum handler of one name
    // in two modules, say) that differ above the attribute: the file does not tell which
    // this is, so it tells nothing, rather than the other one's route.
    match found.split_first() {
        Some((first, rest)) if rest.iter().all(|other| same(other, first)) => first.clone(),
        _ => Vec::new(),
    }
}

fn above(attrs: &[Attribute], is_this: fn(&AttrKind) -> bool) -> Vec<Attribute> {
    match attrs
        .iter()
        .position(|attr| is_this(&syntax::classify(attr)))
    {
        Some(index) => attrs[..index].to_vec(),
        None => Vec::new(),
    }
}

fn same(a: &[Attribute], b: &[Attribute]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.to_token_stream().to_string() == b.to_token_stream().to_string())
}

/// The text of the file `span` is in, if the compiler knows it as a local file.
fn source_file(span: Span) -> Option<String> {
    // Outside a procedural macro (the crate's own unit tests) there is no compiler to
    // ask: `unwrap` would panic there.
    if !proc_macro::is_available() {
        return None;
    }
    let path = span.unwrap().local_file()?;
    std::fs::read_to_string(path).ok()
}

/// Calls `f` with every function in `items` and in their inline modules. Route handlers
/// are free functions: `#[idempotent]` refuses methods with its own message.
fn visit_items<'a>(items: &'a [Item], f: &mut impl FnMut(&'a ItemFn)) {
    for item in items {
        match item {
            Item::Fn(func) => f(func),
            Item::Mod(module) => {
                if let Some((_, items)) = &module.content {
                    visit_items(items, f);
                }
            }
            _ => {}
        }
    }
}
