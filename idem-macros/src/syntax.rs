//! What the handler's own syntax says, read with syn: the HTTP method table, the route
//! attributes of actix-web, the roles of parameters, the rewrites of their types, and the
//! spans generated names and paths take.
//! Nothing here reports errors; `check` decides what is wrong.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, ItemFn, Lifetime, Lit, LitStr,
    MetaNameValue, Pat, PathArguments, Token, Type, TypePath,
};

/// An HTTP method that actix-web's route attributes know.
#[derive(Clone, Copy)]
struct Method {
    /// As sent on the wire and written in `route(method = "..")`.
    name: &'static str,
    /// The attribute that registers a handler for it: `#[post("/orders")]`.
    attribute: &'static str,
    /// Safe in the sense of RFC 9110 (section 9.2.1; QUERY by its draft): repeating the
    /// request changes nothing, so a key adds nothing and `#[idempotent]` refuses it.
    safe: bool,
}

/// The one table of methods: which attribute names are routes, what `method = ".."`
/// means, and which methods `#[idempotent]` refuses. actix-web 4.5's list.
const METHODS: [Method; 10] = [
    Method::new("CONNECT", "connect", false),
    Method::new("DELETE", "delete", false),
    Method::new("GET", "get", true),
    Method::new("HEAD", "head", true),
    Method::new("OPTIONS", "options", true),
    Method::new("PATCH", "patch", false),
    Method::new("POST", "post", false),
    Method::new("PUT", "put", false),
    Method::new("QUERY", "query", true),
    Method::new("TRACE", "trace", true),
];

impl Method {
    const fn new(name: &'static str, attribute: &'static str, safe: bool) -> Self {
        Self {
            name,
            attribute,
            safe,
        }
    }

    fn by_attribute(ident: &Ident) -> Option<Self> {
        METHODS.into_iter().find(|method| ident == method.attribute)
    }

    fn by_name(name: &str) -> Option<Self> {
        METHODS.into_iter().find(|method| method.name == name)
    }
}

/// One method a route attribute registers, with the token that names it.
pub(crate) struct RouteMethod {
    /// Upper case, as actix-web requires; a custom method keeps its spelling.
    pub(crate) name: String,
    pub(crate) safe: bool,
    /// The attribute's name (`post` in `#[post(..)]`) or the `method = ".."` string.
    pub(crate) span: Span,
    /// Whether it was written as `method = ".."` of `#[route]` rather than as the
    /// attribute's name.
    pub(crate) in_route_list: bool,
}

/// A route attribute of actix-web, as far as its arguments could be read (actix-web
/// reports what it cannot read itself).
pub(crate) struct Route {
    pub(crate) methods: Vec<RouteMethod>,
    pub(crate) path: Option<LitStr>,
}

/// What an attribute of the user's function is to `#[idempotent]`.
pub(crate) enum AttrKind {
    /// A route attribute: with `#[idempotent]` outermost it arrives here and must
    /// register the generated handler, not the user's function. `#[routes]` itself
    /// registers nothing: the method attributes below it do.
    Route(Route),
    /// Another `#[idempotent]`.
    Idempotent,
    /// `#[idem::exempt(..)]`, which contradicts `#[idempotent]`.
    Exempt,
    /// A lint level, which applies to both functions.
    Lint,
    /// Documentation, `cfg` and deprecation: they describe the registered handler.
    Outer,
    /// Everything else keeps its meaning on the user's function (`instrument`, ...).
    Inner,
}

/// Classifies by the last segment of the attribute's path, so `#[actix_web::post]` and
/// a `use`d `#[post]` are the same.
pub(crate) fn classify(attr: &Attribute) -> AttrKind {
    let Some(name) = attr.path().segments.last().map(|s| &s.ident) else {
        return AttrKind::Inner;
    };
    if let Some(method) = Method::by_attribute(name) {
        return AttrKind::Route(Route {
            methods: vec![RouteMethod {
                name: method.name.to_owned(),
                safe: method.safe,
                span: name.span(),
                in_route_list: false,
            }],
            path: attr.parse_args_with(route_path).ok(),
        });
    }
    match name.to_string().as_str() {
        "route" => AttrKind::Route(route_with_methods(attr)),
        "routes" => AttrKind::Route(Route {
            methods: Vec::new(),
            path: None,
        }),
        "idempotent" => AttrKind::Idempotent,
        "exempt" => AttrKind::Exempt,
        "allow" | "warn" | "deny" | "forbid" | "expect" => AttrKind::Lint,
        "doc" | "cfg" | "deprecated" => AttrKind::Outer,
        _ => AttrKind::Inner,
    }
}

/// The methods of every route attribute among `attrs`, each with its attribute's path.
pub(crate) fn routes(attrs: &[Attribute]) -> Vec<(RouteMethod, Option<LitStr>)> {
    let mut routes = Vec::new();
    for attr in attrs {
        if let AttrKind::Route(route) = classify(attr) {
            routes.extend(route.methods.into_iter().map(|m| (m, route.path.clone())));
        }
    }
    routes
}

/// The method and path the registry records for a handler: those of its one route
/// attribute, when that registers one method at a path that could be read. A handler
/// routed for several methods has no one route to record.
pub(crate) fn single_route(routes: &[(RouteMethod, Option<LitStr>)]) -> Option<(String, LitStr)> {
    match routes {
        [(method, Some(path))] => Some((method.name.clone(), path.clone())),
        _ => None,
    }
}

/// The path of `#[post("/orders", ..)]`; the options after it are actix-web's business.
fn route_path(input: ParseStream<'_>) -> syn::Result<LitStr> {
    let path = input.parse()?;
    let _: proc_macro2::TokenStream = input.parse()?;
    Ok(path)
}

/// `#[route("/orders", method = "POST", method = "PUT", guard = "..")]`, parsed as
/// actix-web parses it: a path, then `name = value` options.
fn route_with_methods(attr: &Attribute) -> Route {
    let parsed = attr.parse_args_with(|input: ParseStream<'_>| {
        let path: LitStr = input.parse()?;
        let options = if input.is_empty() {
            Punctuated::new()
        } else {
            input.parse::<Token![,]>()?;
            Punctuated::<MetaNameValue, Token![,]>::parse_terminated(input)?
        };
        Ok((path, options))
    });
    let Ok((path, options)) = parsed else {
        return Route {
            methods: Vec::new(),
            path: None,
        };
    };
    let methods = options
        .iter()
        .filter(|option| option.path.is_ident("method"))
        .filter_map(|option| match &option.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => Some(lit),
            _ => None,
        })
        .map(|lit| {
            let name = lit.value();
            RouteMethod {
                // actix-web accepts an unknown upper-case name as a custom method.
                safe: Method::by_name(&name).is_some_and(|method| method.safe),
                name,
                span: lit.span(),
                in_route_list: true,
            }
        })
        .collect();
    Route {
        methods,
        path: Some(path),
    }
}

/// What idem passes for a parameter instead of running it as an extractor.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// An extractor, run over the buffered request.
    Extractor,
    /// The single-transaction form's transaction, `idem::Tx`.
    Tx,
    /// The phased form's `idem::Phases`.
    Phases,
    /// The phased form's `idem::redis::Steps`, with the keys in Redis.
    Steps,
}

impl Role {
    /// By the type's last path segment: `Tx` or `Phases`, however the path is spelled
    /// (`idem::Tx`, a `use`d `Tx`, a re-export).
    pub(crate) fn of(ty: &Type) -> Self {
        match ty {
            Type::Path(path) if last_segment_is(path, "Tx") => Self::Tx,
            Type::Path(path) if last_segment_is(path, "Phases") => Self::Phases,
            Type::Path(path) if last_segment_is(path, "Steps") => Self::Steps,
            _ => Self::Extractor,
        }
    }

    /// The role of `&idem::Tx` or `&mut idem::Phases`, which idem cannot pass.
    pub(crate) fn of_borrowed(ty: &Type) -> Option<Self> {
        let Type::Reference(reference) = ty else {
            return None;
        };
        Some(Self::of(&reference.elem)).filter(|role| role.names_database())
    }

    /// Whether the parameter's type names the database its keys are in: `Tx` and
    /// `Phases`, not an extractor or `Steps` (whose keys are in Redis).
    pub(crate) fn names_database(self) -> bool {
        matches!(self, Self::Tx | Self::Phases)
    }

    /// The type's name as the docs spell it.
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            Self::Tx => "Tx",
            Self::Phases => "Phases",
            Self::Steps => "Steps",
            Self::Extractor => "",
        }
    }
}

/// Whether `ty` is an extractor of the whole request body as text or bytes (`String`,
/// `Bytes`, `BytesMut`, bare or by any path). Both frameworks extract these from the
/// body; `String` is also an `idem::ScopeKey`, so the type system
/// alone would let a client-chosen body scope the keys.
pub(crate) fn is_body(ty: &Type) -> bool {
    let Type::Path(path) = ty else { return false };
    path.qself.is_none()
        && ["String", "Bytes", "BytesMut"]
            .iter()
            .any(|name| last_segment_is(path, name))
}

/// `SignedWebhook`, by any path, or a reference to it: a scope whose value is a sender
/// that signed the body, so the key must come from what it signed.
pub(crate) fn is_signed_webhook(ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) => is_signed_webhook(&reference.elem),
        Type::Path(path) => last_segment_is(path, "SignedWebhook"),
        _ => false,
    }
}

fn last_segment_is(path: &TypePath, name: &str) -> bool {
    path.qself.is_none() && path.path.segments.last().is_some_and(|s| s.ident == name)
}

/// The name a parameter's pattern binds: `account` in `account: T` and in
/// `mut account: T`; `None` for destructuring patterns.
pub(crate) fn binding(pat: &Pat) -> Option<&Ident> {
    match pat {
        Pat::Ident(pat) => Some(&pat.ident),
        _ => None,
    }
}

/// Gives each `Tx` parameter the lifetime an `async fn` parameter needs (E0726 otherwise)
/// and a `mut` binding, so `tx: idem::Tx` can be written as the docs show; `Phases`
/// parameters get the `mut` binding its `run` needs. A `Tx` or `Phases` that names no
/// database is given `unnamed(ty)` as its database; one that names it has it replaced
/// by `named(database)`.
pub(crate) fn normalize_params(
    func: &mut ItemFn,
    unnamed: impl Fn(&Type) -> Type,
    named: impl Fn(&Type) -> Type,
) {
    for input in &mut func.sig.inputs {
        let FnArg::Typed(arg) = input else { continue };
        let role = Role::of(&arg.ty);
        if role == Role::Extractor {
            continue;
        }
        if role == Role::Steps {
            // No database to name: only the `mut` binding below.
        } else if !names_backend(&arg.ty) {
            let backend = unnamed(&arg.ty);
            if let Type::Path(path) = &mut *arg.ty {
                set_backend(path, backend);
            }
        } else if let Some(database) = backend_arg_mut(&mut arg.ty) {
            *database = named(database);
        }
        if role == Role::Tx
            && let Type::Path(path) = &mut *arg.ty
        {
            set_lifetime(path, Lifetime::new("'_", path.span()));
        }
        if let Pat::Ident(pat) = &mut *arg.pat
            && pat.by_ref.is_none()
            && pat.mutability.is_none()
        {
            pat.mutability = Some(Token![mut](pat.ident.span()));
            arg.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
        }
    }
}

/// Gives each `&Tx` or `&mut Phases` parameter that names no database `backend` as its
/// database, as [`normalize_params`] does for those taken by value.
pub(crate) fn borrowed_backends(func: &mut ItemFn, backend: impl Fn(&Type) -> Type) {
    for input in &mut func.sig.inputs {
        let FnArg::Typed(arg) = input else { continue };
        let Type::Reference(reference) = &mut *arg.ty else {
            continue;
        };
        if Role::of(&reference.elem) == Role::Extractor || names_backend(&reference.elem) {
            continue;
        }
        let database = backend(&reference.elem);
        if let Type::Path(path) = &mut *reference.elem {
            set_backend(path, database);
        }
    }
}

/// The spans of a type's first and last tokens: a span from one to the other covers the
/// type as written (stable proc macros cannot join spans themselves).
pub(crate) fn first_and_last(ty: &Type) -> (Span, Span) {
    let mut tokens = quote::ToTokens::to_token_stream(ty).into_iter();
    let first = tokens
        .next()
        .map_or_else(Span::call_site, |token| token.span());
    let last = tokens.last().map_or(first, |token| token.span());
    (first, last)
}

/// Whether a `Tx` or `Phases` type names its database: `Tx<'_, sqlx::Sqlite>`,
/// `Phases<DB>`, not `Tx`, `Tx<'_>` or `Phases`.
pub(crate) fn names_backend(ty: &Type) -> bool {
    let Type::Path(path) = ty else { return true };
    path.path
        .segments
        .last()
        .is_none_or(|last| match &last.arguments {
            PathArguments::AngleBracketed(args) => args
                .args
                .iter()
                .any(|arg| !matches!(arg, GenericArgument::Lifetime(_))),
            PathArguments::None => false,
            PathArguments::Parenthesized(_) => true,
        })
}

/// The database a `Tx` or `Phases` names: its type argument as written (`sqlx::Sqlite`
/// in `Tx<'_, sqlx::Sqlite>`).
pub(crate) fn backend_arg(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

fn backend_arg_mut(ty: &mut Type) -> Option<&mut Type> {
    let Type::Path(path) = ty else { return None };
    let PathArguments::AngleBracketed(args) = &mut path.path.segments.last_mut()?.arguments else {
        return None;
    };
    args.args.iter_mut().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// Appends the database to the type's arguments, after its lifetime if it has one.
fn set_backend(path: &mut TypePath, backend: Type) {
    let Some(last) = path.path.segments.last_mut() else {
        return;
    };
    match &mut last.arguments {
        PathArguments::None => {
            last.arguments = PathArguments::AngleBracketed(syn::parse_quote!(<#backend>));
        }
        PathArguments::AngleBracketed(args) => args.args.push(GenericArgument::Type(backend)),
        PathArguments::Parenthesized(_) => {}
    }
}

fn set_lifetime(path: &mut TypePath, lifetime: Lifetime) {
    let Some(last) = path.path.segments.last_mut() else {
        return;
    };
    match &mut last.arguments {
        PathArguments::None => {
            last.arguments = PathArguments::AngleBracketed(syn::parse_quote!(<#lifetime>));
        }
        PathArguments::AngleBracketed(args) => {
            let has_lifetime = args
                .args
                .iter()
                .any(|arg| matches!(arg, GenericArgument::Lifetime(_)));
            if !has_lifetime {
                args.args.insert(0, GenericArgument::Lifetime(lifetime));
            }
        }
        PathArguments::Parenthesized(_) => {}
    }
}

/// The locals of the generated handler: mixed-site, so the user's body cannot see them
/// and they cannot shadow the user's names.
pub(crate) fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// The crate path with every token spanned at `span`, so that a call spanned at the
/// user's type is wholly the user's: its error is reported at that type alone, not from
/// the attribute to the type. The path resolves the same from there (it is absolute, or
/// written by the user).
pub(crate) fn krate_at(krate: &syn::Path, span: Span) -> TokenStream {
    krate
        .to_token_stream()
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}
