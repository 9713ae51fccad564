//! Reads `#[idempotent(..)]` arguments, keeping each value's span. Nothing here looks at
//! the handler: `model` checks the arguments against it.

use proc_macro2::{Spacing, Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Meta, Token, Type};

use crate::errors::Errors;

/// The valid argument names, as listed in error messages.
const KEYS: &str =
    "`scope`, `retention`, `lease`, `key`, `store`, `backend`, `state` (axum) or `crate`";

/// One argument as the list left it.
pub(crate) enum Arg<T> {
    /// Not written.
    Absent,
    /// Written but unreadable, or the whole list was: the error is reported already, so
    /// the argument is neither checked nor called missing.
    Unreadable,
    /// Written and read.
    Given(T),
}

impl<T> Arg<T> {
    pub(crate) fn given(&self) -> Option<&T> {
        match self {
            Self::Given(value) => Some(value),
            Self::Absent | Self::Unreadable => None,
        }
    }
}

/// The arguments as written; not yet checked against the handler.
pub(crate) struct Args {
    /// `scope = <parameter>`.
    pub(crate) scope: Arg<Ident>,
    /// `retention = "<duration>"`.
    pub(crate) retention: Arg<LitStr>,
    /// `lease = "<duration>"`: the phased form.
    pub(crate) lease: Arg<LitStr>,
    /// `crate = <path>`: where the generated code finds idem, for a renamed dependency
    /// or a re-export.
    pub(crate) krate: Arg<syn::Path>,
    /// `key = header("..")` or `key = json("..")`: a webhook event's id is the key.
    pub(crate) key: Arg<KeyArg>,
    /// `backend = sqlx::Sqlite`: the database of a handler that takes no `Tx` or
    /// `Phases`, needed when both databases are enabled.
    pub(crate) backend: Arg<Type>,
    /// `store = redis`: the keys live in Redis, for an effect outside the database; the
    /// name's span, for the errors about what goes with it.
    pub(crate) store: Arg<Ident>,
    /// `state = AppState`: the one router state an axum handler is for, so that each
    /// extractor is checked against it at its parameter. The name is kept for the
    /// error on an actix-web handler, which has no router state.
    pub(crate) state: Arg<(Ident, Type)>,
    /// The whole argument list, for "missing argument" errors.
    pub(crate) span: Span,
    /// The list's last token: with `span`, what a message about the whole list
    /// underlines (stable proc macros cannot join spans).
    pub(crate) end: Span,
}

/// Parses the attribute arguments. Errors go to `errors`, and what could be read is
/// still returned, so the handler is checked against it too.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
    let span = if tokens.is_empty() {
        Span::call_site()
    } else {
        tokens.span()
    };
    let end = tokens
        .clone()
        .into_iter()
        .last()
        .map_or(span, |token| token.span());
    let mut args = Args {
        scope: Arg::Absent,
        retention: Arg::Absent,
        lease: Arg::Absent,
        krate: Arg::Absent,
        key: Arg::Absent,
        backend: Arg::Absent,
        store: Arg::Absent,
        state: Arg::Absent,
        span,
        end,
    };
    let items = match Punctuated::<Item, Token![,]>::parse_terminated.parse2(tokens) {
        Ok(items) => items,
        Err(error) => {
            errors.push(error);
            args.scope = Arg::Unreadable;
            args.retention = Arg::Unreadable;
            args.lease = Arg::Unreadable;
            args.krate = Arg::Unreadable;
            args.key = Arg::Unreadable;
            args.backend = Arg::Unreadable;
            args.store = Arg::Unreadable;
            args.state = Arg::Unreadable;
            return args;
        }
    };
    for item in items {
        let meta = match item {
            Item::Typed(name, value) => {
                let stored = if name == "state" {
                    set(
                        &mut args.state,
                        &name,
                        state(value).map(|ty| (name.clone(), ty)),
                    )
                } else {
                    set(&mut args.backend, &name, backend(value))
                };
                if let Err(error) = stored {
                    errors.push(error);
                }
                continue;
            }
            Item::Meta(meta) => meta,
        };
        let Meta::NameValue(pair) = meta else {
            errors.push(syn::Error::new_spanned(
                &meta,
                format!("expected `name = value` arguments: {KEYS}, e.g. `scope = account`"),
            ));
            continue;
        };
        let Some(name) = pair.path.get_ident() else {
            errors.push(unknown(&pair.path));
            continue;
        };
        let stored = match name.to_string().as_str() {
            "scope" => set(&mut args.scope, name, scope(&pair.value)),
            "retention" => set(
                &mut args.retention,
                name,
                duration(name, &pair.value, "24h"),
            ),
            "lease" => set(&mut args.lease, name, duration(name, &pair.value, "30s")),
            "crate" => set(&mut args.krate, name, crate_path(&pair.value)),
            "key" => set(&mut args.key, name, key_source(&pair.value)),
            "store" => set(&mut args.store, name, store(&pair.value)),
            _ => Err(unknown(&pair.path)),
        };
        if let Err(error) = stored {
            errors.push(error);
        }
    }
    args
}

/// Stores a value read for an argument; one helper for "given more than once", so every
/// argument reports it the same way, at the second name.
fn set<T>(slot: &mut Arg<T>, name: &Ident, value: syn::Result<T>) -> syn::Result<()> {
    if !matches!(slot, Arg::Absent) {
        return Err(syn::Error::new(
            name.span(),
            format!("`{name}` is given more than once: keep one"),
        ));
    }
    match value {
        Ok(value) => {
            *slot = Arg::Given(value);
            Ok(())
        }
        Err(error) => {
            *slot = Arg::Unreadable;
            Err(error)
        }
    }
}

/// `store = redis`: the one store an attribute names; without it the keys are in the
/// database of the `Idem` the application registers.
fn store(value: &Expr) -> syn::Result<Ident> {
    let ident = match value {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => path.get_ident().cloned(),
        _ => None,
    };
    match ident {
        Some(ident) if ident == "redis" => Ok(ident),
        _ => Err(syn::Error::new_spanned(
            value,
            "`store` takes `redis` (`store = redis`), for an endpoint whose effect lives \
             outside the database; without `store` the keys are in the database of the \
             registered `idem::Idem`",
        )),
    }
}

/// `scope = account`: the name of a handler parameter.
fn scope(value: &Expr) -> syn::Result<Ident> {
    let ident = match value {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => path.get_ident().cloned(),
        _ => None,
    };
    ident.ok_or_else(|| {
        syn::Error::new_spanned(
            value,
            "`scope` takes the name of a handler parameter, e.g. `scope = account`",
        )
    })
}

/// `retention = "24h"`, `lease = "30s"`: a duration string, read by `model`.
fn duration(name: &Ident, value: &Expr, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes a duration string, e.g. `{name} = \"{example}\"`"),
        )),
    }
}

/// `crate = my_idem` or `crate = ::shop::idem`; also the string form that tokio's and
/// serde's attributes take, `crate = "my_idem"`.
pub(crate) fn crate_path(value: &Expr) -> syn::Result<syn::Path> {
    let path = match value {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => Some(path.clone()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit.parse::<syn::Path>().ok(),
        _ => None,
    };
    path.ok_or_else(|| {
        syn::Error::new_spanned(
            value,
            "`crate` takes the path idem is reached by, e.g. `crate = my_idem` for a \
             dependency renamed to `my_idem`",
        )
    })
}

/// One argument of the list. `state` and `backend` take a type, which the expression a
/// `Meta` holds cannot spell once it has generics: `AppState<Foo>` reads as two
/// comparisons. Every other argument is a `Meta`.
enum Item {
    /// `state = ..` or `backend = ..`: the value as a type, or as the expression it was
    /// when it is not one (for a message about this argument alone).
    Typed(Ident, Result<Type, Expr>),
    /// Any other argument, read as `syn` reads an attribute's.
    Meta(Meta),
}

impl Parse for Item {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if !takes_a_type(input) {
            return input.parse().map(Self::Meta);
        }
        let name: Ident = input.parse()?;
        let _: Token![=] = input.parse()?;
        // A type only if it is the whole value; `"sqlite"` or `a + b` are read as the
        // expressions they are, to be refused with the argument's own message.
        let fork = input.fork();
        let whole_type = fork.parse::<Type>().is_ok() && (fork.is_empty() || fork.peek(Token![,]));
        let value = if whole_type {
            Ok(input.parse()?)
        } else {
            Err(input.parse()?)
        };
        Ok(Self::Typed(name, value))
    }
}

/// Whether the next argument is `state = ..` or `backend = ..`.
fn takes_a_type(input: ParseStream<'_>) -> bool {
    let Some((name, rest)) = input.cursor().ident() else {
        return false;
    };
    let assigned = rest
        .punct()
        .is_some_and(|(punct, _)| punct.as_char() == '=' && punct.spacing() == Spacing::Alone);
    assigned && (name == "state" || name == "backend")
}

/// `backend = sqlx::Sqlite`: a type path, checked by the compiler where it is used.
fn backend(value: Result<Type, Expr>) -> syn::Result<Type> {
    match value {
        Ok(ty @ Type::Path(_)) => Ok(ty),
        Ok(ty) => Err(not_a_backend(&ty)),
        Err(expr) => Err(not_a_backend(&expr)),
    }
}

fn not_a_backend(value: &dyn quote::ToTokens) -> syn::Error {
    syn::Error::new_spanned(
        value,
        "`backend` takes the database's type, e.g. `backend = sqlx::Sqlite`",
    )
}

/// `state = AppState` or `state = AppState<Shop>`: a type, checked by the compiler
/// against each extractor. `_` and `impl ..` cannot name the one state of an impl.
fn state(value: Result<Type, Expr>) -> syn::Result<Type> {
    match value {
        Ok(Type::Infer(ty)) => Err(not_a_state(&ty)),
        Ok(Type::ImplTrait(ty)) => Err(not_a_state(&ty)),
        Ok(ty) => Ok(ty),
        Err(expr) => Err(not_a_state(&expr)),
    }
}

fn not_a_state(value: &dyn quote::ToTokens) -> syn::Error {
    syn::Error::new_spanned(
        value,
        "`state` takes the router's state type, e.g. `state = AppState`",
    )
}

/// Where the key comes from instead of the `Idempotency-Key` header, as written.
pub(crate) enum KeyArg {
    /// `header("webhook-id")`: a request header.
    Header(LitStr),
    /// `json("id")`: a field of the JSON body (a JSON Pointer when it starts with `/`).
    Json(LitStr),
}

const KEY_FORMS: &str = "`key = header(\"webhook-id\")` for a request header or \
                         `key = json(\"id\")` for a field of the JSON body";

/// `key = header("webhook-id")` or `key = json("id")`; the value is checked by `validate`.
fn key_source(value: &Expr) -> syn::Result<KeyArg> {
    let Expr::Call(call) = value else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`key` names where the event's id is: write {KEY_FORMS}"),
        ));
    };
    let func = match &*call.func {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => path.get_ident(),
        _ => None,
    };
    let Some(func) = func else {
        return Err(syn::Error::new_spanned(
            &call.func,
            format!("unknown key source: write {KEY_FORMS}"),
        ));
    };
    let make: fn(LitStr) -> KeyArg = match func.to_string().as_str() {
        "header" => KeyArg::Header,
        "json" => KeyArg::Json,
        other => {
            return Err(syn::Error::new(
                func.span(),
                format!("unknown key source `{other}`: write {KEY_FORMS}"),
            ));
        }
    };
    let mut args = call.args.iter();
    match (args.next(), args.next()) {
        (
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            })),
            None,
        ) => Ok(make(lit.clone())),
        (Some(arg), None) => Err(syn::Error::new_spanned(
            arg,
            format!("`{func}(..)` takes a string literal: write {KEY_FORMS}"),
        )),
        (None, _) => Err(syn::Error::new(
            call.paren_token.span.join(),
            format!("`{func}(..)` takes one string literal: write {KEY_FORMS}"),
        )),
        (Some(_), Some(extra)) => Err(syn::Error::new_spanned(
            extra,
            format!("`{func}(..)` takes one string literal; remove the others"),
        )),
    }
}

fn unknown(path: &syn::Path) -> syn::Error {
    let name = quote::quote!(#path).to_string().replace(' ', "");
    syn::Error::new_spanned(path, format!("unknown argument `{name}`: expected {KEYS}"))
}
