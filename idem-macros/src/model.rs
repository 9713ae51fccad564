//! The checked model of one handler: every fact the expansion needs (the scope's name,
//! the backend, the lease, the route), resolved by `check`, so `expand` reads no syntax.

use std::time::Duration;

use proc_macro2::TokenStream;
use syn::{Attribute, Ident, ItemFn, LitStr, Type, Visibility};

use crate::syntax::Role;
use crate::validate;

/// The web framework a handler is generated for: chosen by the attribute's path
/// (`#[idem::idempotent]` or `#[idem::axum::idempotent]`), so a project that uses both
/// frameworks says on each handler which one it is, and nothing depends on features.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framework {
    /// actix-web 4: a function taking the request and its payload.
    Actix,
    /// axum 0.8: a unit struct that implements axum's `Handler`.
    Axum,
}

impl Framework {
    /// The attribute as the user wrote it, for messages about the handler.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Self::Actix => "`#[idempotent]`",
            Self::Axum => "`#[idem::axum::idempotent]`",
        }
    }
}

/// What the attribute expands to.
pub(crate) enum Expansion {
    Handler(Model),
    Rejected(Rejected),
}

/// The checked handler, with every fact resolved.
pub(crate) struct Model {
    pub(crate) framework: Framework,
    /// The path the generated code reaches idem by (`crate = ..`, or `::idem`).
    pub(crate) krate: syn::Path,
    pub(crate) shell: Shell,
    /// Every parameter, in declaration order.
    pub(crate) params: Vec<Param>,
    /// The scope parameter.
    pub(crate) scope: Scope,
    /// The backend's type, named through the transaction or phases parameter.
    pub(crate) backend: TokenStream,
    pub(crate) retention: Duration,
    /// axum's `state = ..`: the one router state the `Handler` impl is for, each
    /// extractor checked against it at its parameter; `None`: every state the extractors
    /// accept (and any mistake reported where the handler is routed). Tokens rather than
    /// the `Type`, which is all the expansion needs of it.
    pub(crate) state: Option<TokenStream>,
    /// The phased form's lease; `Some` exactly when a parameter is `Phases`, or the keys
    /// are in Redis.
    pub(crate) lease: Option<Duration>,
    /// `store = redis`: the keys live in Redis, and the handler may take `Steps`.
    pub(crate) redis: bool,
    /// A webhook handler's key source (`key = ..`); `None`: the `Idempotency-Key` header.
    pub(crate) key: Option<validate::KeySpec>,
    /// The method and path of the one route attribute, below `#[idempotent]` or above it,
    /// for the registry.
    pub(crate) route: Option<(String, LitStr)>,
}

/// The two functions every expansion emits: a handler actix-web registers, with the
/// user's function nested in it.
pub(crate) struct Shell {
    /// The generated handler's attributes: docs, `cfg`, lints, routes.
    pub(crate) attrs: Vec<Attribute>,
    /// The generated handler's visibility, as the user wrote it.
    pub(crate) vis: Visibility,
    /// The user's function: private, with `Tx` parameters given a lifetime and `mut`,
    /// a `Tx` or `Phases` that names no database given [`UNNAMED`], and without the
    /// attributes that moved to the generated handler.
    pub(crate) inner: ItemFn,
    /// The type [`UNNAMED`] stands for: when a parameter or the handler names no
    /// database, the runtime's `unnamed_backend!`, which is the default backend or the
    /// one compile error; when one is named (but for the handler's own type parameter),
    /// that database, checked. Defined once beside the user's function and named by both
    /// it and the generated code, so an error is reported once.
    pub(crate) unnamed: Option<TokenStream>,
}

/// The name of the alias for the database nothing names (see [`Shell::unnamed`]).
pub(crate) const UNNAMED: &str = "__IdemBackend";

/// A parameter of the user's function.
pub(crate) struct Param {
    pub(crate) ty: Type,
    pub(crate) role: Role,
}

/// The parameter named by `scope = ..`.
pub(crate) struct Scope {
    /// Its index among the parameters; always an extractor.
    pub(crate) index: usize,
    /// The name its pattern binds (`account` in `mut account: Account`).
    pub(crate) name: Ident,
}

/// A handler with mistakes: the errors, and what to emit beside them so that editors
/// keep completing inside the function and a route attribute around it does not add
/// "Handler is not satisfied".
pub(crate) struct Rejected {
    pub(crate) framework: Framework,
    pub(crate) krate: syn::Path,
    /// `None` when the one mistake is reported by the alias of the database (a borrowed
    /// `Tx` or `Phases` that names none; see `backend::borrowed_backend`).
    pub(crate) error: Option<syn::Error>,
    pub(crate) fallback: Fallback,
}

pub(crate) enum Fallback {
    /// The user's function nested in a handler actix-web can register.
    Nested(Shell),
    /// A method (it has `self`) cannot be nested in a free function: emitted as written.
    AsWritten(ItemFn),
}
