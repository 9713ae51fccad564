//! The handler's database, as the generated code names it: the type written in its
//! `Tx`/`Phases` (or `backend = ..`), checked once where it is written, or the runtime's
//! choice where nothing names one.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{Ident, ItemFn, Type};

use crate::model::{Param, UNNAMED};
use crate::parse::Args;
use crate::syntax::{self, Role};

/// The backend's type: the transaction's or the phases' type parameter, or `backend = ..`
/// when the handler has neither. Spanned at the type that names it, so an unsupported
/// database is reported there. Where nothing names one (`unnamed`), the alias
/// [`UNNAMED`].
pub(crate) fn backend(
    krate: &syn::Path,
    args: &Args,
    func: &ItemFn,
    params: &[Param],
    unnamed: bool,
) -> TokenStream {
    if unnamed {
        let alias = Ident::new(UNNAMED, Span::mixed_site());
        return quote!(#alias);
    }
    let database = match params.iter().find(|p| p.role.names_database()) {
        Some(param) => syntax::backend_arg(&param.ty),
        None => args.backend.given(),
    };
    match database {
        // Not reached otherwise: a database written as a type other than the handler's
        // type parameter, or none, has the alias.
        Some(database) if is_type_param(&func.sig.generics, database) => quote!(#database),
        _ => quote!(#krate::DefaultBackend),
    }
}

/// Whether the database is one of the handler's type parameters (`DB` in
/// `fn touch<DB: idem::Backend>(.., tx: idem::Tx<'_, DB>)`): it stays as written, as the
/// projection would hide it from inference where the handler calls the user's function,
/// and its own bound is what checks it.
pub(crate) fn is_type_param(generics: &syn::Generics, database: &Type) -> bool {
    let Type::Path(path) = database else {
        return false;
    };
    path.qself.is_none()
        && generics
            .type_params()
            .any(|param| path.path.is_ident(&param.ident))
}

/// The database as written, checked where it is written, for the alias [`UNNAMED`] the
/// user's `Tx` and the generated code name: a type that is no database is one error at
/// that type. The check sits in an array length, which the alias's one definition
/// evaluates once, and makes the whole type an error type that adds no other error
/// (neither at the parameter's `Tx` nor in the generated code). The path opens at the
/// type's first token and closes at its last, so that the error underlines the whole
/// type as written (`sqlx::Postgres`, not `sqlx`).
pub(crate) fn checked_backend(krate: &syn::Path, database: &Type) -> TokenStream {
    let (first, last) = syntax::first_and_last(database);
    let at = syntax::krate_at(krate, first);
    let assoc = Ident::new("CHECKED", last);
    quote_spanned! {first=>
        <[#database; <#database as #at::__private::IdemDatabase>::#assoc] as #at::__private::Named>::Backend
    }
}

/// The database of a `Tx` or `Phases` that names none, or of a handler that takes
/// neither (`form` says which): `DefaultBackend` while one database is enabled, else a
/// compile error saying to name one, spanned from `first` to `last` so that it underlines
/// the user's whole type (or the attribute's arguments) and nothing of the generated code.
pub(crate) fn unnamed_backend(
    krate: &syn::Path,
    role: Role,
    first: Span,
    last: Span,
) -> TokenStream {
    let message = match role {
        Role::Tx => {
            "both `postgres` and `sqlite` are enabled, so a bare `idem::Tx` names no database: \
             write `idem::Tx<'_, sqlx::Sqlite>` (or `sqlx::Postgres`), or enable only one"
        }
        Role::Phases => {
            "both `postgres` and `sqlite` are enabled, so a bare `idem::Phases` names no \
             database: write `idem::Phases<sqlx::Sqlite>` (or `sqlx::Postgres`), or enable \
             only one"
        }
        // The handler itself: it takes neither (`Steps` keeps no key in a database, and
        // never reaches here).
        Role::Extractor | Role::Steps => {
            "both `postgres` and `sqlite` are enabled, and this handler takes no `idem::Tx` \
             or `idem::Phases` to name its database: add `backend = sqlx::Sqlite` (or \
             `sqlx::Postgres`), or enable only one"
        }
    };
    let path = syntax::krate_at(krate, first);
    let one = quote_spanned!(first=> #path::DefaultBackend);
    chosen_by_features(
        krate,
        one,
        erroneous(krate, message, first, last),
        first,
        last,
    )
}

/// The database of a `&mut idem::Tx<'_>` (or `&mut idem::Phases`) that names none, taken
/// by reference where idem passes it by value: one error at the parameter's type, which
/// says to take it by value and, with both databases enabled, to name the database too
/// (`backend = ..` is refused beside a `Tx` or `Phases`, so the type is where it goes).
/// Every use of the type is an error type, so the user's function adds no other error.
pub(crate) fn borrowed_backend(
    krate: &syn::Path,
    role: Role,
    name: &str,
    first: Span,
    last: Span,
) -> TokenStream {
    let ty = role.type_name();
    let named = match role {
        Role::Phases => "idem::Phases<sqlx::Sqlite>",
        _ => "idem::Tx<'_, sqlx::Sqlite>",
    };
    let one = format!("take `idem::{ty}` by value: write `{name}: idem::{ty}`");
    let both = format!(
        "take `idem::{ty}` by value and name its database, as both `postgres` and `sqlite` \
         are enabled: write `{name}: {named}` (or `sqlx::Postgres`)"
    );
    chosen_by_features(
        krate,
        erroneous(krate, &one, first, last),
        erroneous(krate, &both, first, last),
        first,
        last,
    )
}

/// `one` while one database is enabled, `both` with both: the runtime's macro chooses, as
/// only it knows its features. Its parentheses are spanned at `last`, so that it adds
/// nothing of its own to what an error underlines.
fn chosen_by_features(
    krate: &syn::Path,
    one: TokenStream,
    both: TokenStream,
    first: Span,
    last: Span,
) -> TokenStream {
    let path = syntax::krate_at(krate, first);
    let mut call = quote_spanned!(first=> #path::__private::unnamed_backend!);
    call.extend([spanned_at(
        last,
        proc_macro2::Delimiter::Parenthesis,
        quote!({ #one } { #both }),
    )]);
    call
}

/// A type that is an error, `message`, underlining `first` to `last`: the error sits in
/// an array length, not in type position, where `compile_error!` would stand for `()` and
/// every use of the type would add "`()` is not a database"; an erroneous length makes
/// the whole type erroneous, and rustc reports nothing more about it.
fn erroneous(krate: &syn::Path, message: &str, first: Span, last: Span) -> TokenStream {
    let path = syntax::krate_at(krate, first);
    let mut error = quote_spanned!(first=> ::core::compile_error!);
    error.extend([spanned_at(
        last,
        proc_macro2::Delimiter::Parenthesis,
        quote_spanned!(last=> #message),
    )]);
    quote_spanned! {first=>
        <[(); { #error; 0 }] as #path::__private::Unnamed>::Backend
    }
}

fn spanned_at(
    span: Span,
    delimiter: proc_macro2::Delimiter,
    inner: TokenStream,
) -> proc_macro2::TokenTree {
    let mut group = proc_macro2::Group::new(delimiter, inner);
    group.set_span(span);
    proc_macro2::TokenTree::Group(group)
}
