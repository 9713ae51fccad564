//! Checks the arguments against the handler and builds the model `expand` emits.

use std::time::Duration;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ItemFn, Lifetime, LitStr, Meta, Pat, PathArguments,
    Type, TypePath,
};

use crate::parse::{Args, Errors, KeyArg};

/// Keys must outlive the longest retry horizon; the protocol sets the floor at a day.
const MIN_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Clients are told to come back after `Retry-After: 1`; a shorter lease would let the
/// first duplicate take over an attempt that is merely busy.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// The checked handler, ready to expand.
pub(crate) struct Model {
    /// The user's function, with `Tx` parameters given a lifetime and `mut`.
    pub(crate) func: ItemFn,
    /// Attributes that belong on the generated actix handler (docs, cfg, routes).
    pub(crate) outer_attrs: Vec<Attribute>,
    /// Every parameter, in declaration order.
    pub(crate) params: Vec<Param>,
    /// Index in `params` of the scope parameter.
    pub(crate) scope: usize,
    /// Method and path of a route attribute written below `#[idempotent]`.
    pub(crate) route: Option<(String, syn::LitStr)>,
    pub(crate) retention: Duration,
    /// The phased form's lease; `Some` exactly when a parameter is `Phases`.
    pub(crate) lease: Option<Duration>,
    /// A webhook handler's key source, checked.
    pub(crate) key: Option<KeySpec>,
}

/// Where a webhook handler's key comes from, checked.
pub(crate) enum KeySpec {
    /// A request header's name, in lowercase.
    Header(String),
    /// A top-level JSON member's name, or a JSON Pointer.
    Json(String),
}

pub(crate) struct Param {
    pub(crate) ty: Type,
    pub(crate) role: Role,
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
}

impl Role {
    fn of(ty: &Type) -> Self {
        match ty {
            Type::Path(path) if is_tx_path(path) => Self::Tx,
            Type::Path(path) if is_phases_path(path) => Self::Phases,
            _ => Self::Extractor,
        }
    }
}

/// Where an attribute of the user's function goes.
pub(crate) enum Placement {
    /// Only on the generated handler: docs, `cfg`, routes, deprecation.
    Outer,
    /// Only on the user's function, which keeps its meaning there (`instrument`, ...).
    Inner,
    /// Lint levels apply to both.
    Both,
}

pub(crate) fn placement(attr: &Attribute) -> Placement {
    let Some(name) = attr.path().segments.last().map(|s| s.ident.to_string()) else {
        return Placement::Inner;
    };
    match name.as_str() {
        "allow" | "warn" | "deny" | "forbid" | "expect" => Placement::Both,
        "doc" | "cfg" | "deprecated" => Placement::Outer,
        name if is_route(name) => Placement::Outer,
        _ => Placement::Inner,
    }
}

/// actix-web's route attributes; with `#[idempotent]` outermost they arrive here and
/// must register the generated handler, not the user's function.
fn is_route(name: &str) -> bool {
    matches!(
        name,
        "get"
            | "post"
            | "put"
            | "patch"
            | "delete"
            | "head"
            | "options"
            | "trace"
            | "connect"
            | "route"
            | "routes"
    )
}

/// Gives each `Tx` parameter the lifetime an `async fn` parameter needs (E0726 otherwise)
/// and a `mut` binding, so `tx: idem::Tx` can be written as the docs show; `Phases`
/// parameters get the `mut` binding its `run` needs.
pub(crate) fn normalize_tx_params(func: &mut ItemFn) {
    for input in &mut func.sig.inputs {
        let FnArg::Typed(arg) = input else { continue };
        if let Some(path) = tx_path_mut(&mut arg.ty) {
            set_lifetime(path, Lifetime::new("'_", path.span()), false);
        } else if Role::of(&arg.ty) != Role::Phases {
            continue;
        }
        if let Pat::Ident(pat) = &mut *arg.pat
            && pat.by_ref.is_none()
            && pat.mutability.is_none()
        {
            pat.mutability = Some(syn::Token![mut](pat.ident.span()));
            arg.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
        }
    }
}

/// The `Tx` type with `'static` for its lifetime: names the backend from inside a body.
pub(crate) fn tx_type_static(ty: &Type) -> Type {
    let mut ty = ty.clone();
    if let Some(path) = tx_path_mut(&mut ty) {
        set_lifetime(path, Lifetime::new("'static", Span::call_site()), true);
    }
    ty
}

fn tx_path_mut(ty: &mut Type) -> Option<&mut TypePath> {
    match ty {
        Type::Path(path) if is_tx_path(path) => Some(path),
        _ => None,
    }
}

/// A parameter is the transaction when its type's last path segment is `Tx`.
fn is_tx(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if is_tx_path(path))
}

fn is_tx_path(path: &TypePath) -> bool {
    last_segment_is(path, "Tx")
}

/// The phased form's parameter: a type whose last path segment is `Phases`.
fn is_phases_path(path: &TypePath) -> bool {
    last_segment_is(path, "Phases")
}

fn last_segment_is(path: &TypePath, name: &str) -> bool {
    path.qself.is_none() && path.path.segments.last().is_some_and(|s| s.ident == name)
}

/// `&idem::Tx` or `&mut idem::Phases`: idem's parameters are taken by value.
fn borrowed_idem_param(ty: &Type) -> Option<&'static str> {
    let Type::Reference(reference) = ty else {
        return None;
    };
    match Role::of(&reference.elem) {
        Role::Tx => Some("Tx"),
        Role::Phases => Some("Phases"),
        Role::Extractor => None,
    }
}

fn set_lifetime(path: &mut TypePath, lifetime: Lifetime, replace: bool) {
    let last = path
        .path
        .segments
        .last_mut()
        .expect("checked by is_tx_path");
    match &mut last.arguments {
        PathArguments::None => {
            last.arguments = PathArguments::AngleBracketed(syn::parse_quote!(<#lifetime>));
        }
        PathArguments::AngleBracketed(args) => {
            let existing = args.args.iter_mut().find_map(|arg| match arg {
                GenericArgument::Lifetime(l) => Some(l),
                _ => None,
            });
            match existing {
                Some(l) if replace => *l = lifetime,
                Some(_) => {}
                None => args.args.insert(0, GenericArgument::Lifetime(lifetime)),
            }
        }
        PathArguments::Parenthesized(_) => {}
    }
}

/// Checks everything, reporting every independent problem together. `func` is the
/// function as written, so errors point at the user's tokens.
pub(crate) fn check(args: Args, func: &ItemFn, mut errors: Errors) -> Result<Model, syn::Error> {
    if func.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            func.sig.fn_token.span,
            "`#[idempotent]` handlers must be `async fn`: write `async fn`",
        ));
    }

    let mut outer_attrs = Vec::new();
    for attr in &func.attrs {
        if let Some(method) = safe_method_route(attr) {
            errors.push(syn::Error::new_spanned(
                attr,
                format!(
                    "`#[idempotent]` does not belong on a {method} route: {method} is safe \
                     to retry already; use it on POST, PUT, PATCH or DELETE handlers"
                ),
            ));
        }
        if matches!(placement(attr), Placement::Outer | Placement::Both) {
            outer_attrs.push(attr.clone());
        }
    }

    let Params {
        params,
        tx_name,
        phases_name,
    } = params(func, &mut errors);

    let mut scope = None;
    match &args.scope {
        None if !args.readable => {}
        None => errors.push(syn::Error::new(
            args.span,
            "`scope` is required: name the parameter that identifies the caller, \
             e.g. `scope = account`",
        )),
        Some(name) => match scope_index(func, name) {
            Ok(index) => scope = Some(index),
            Err(error) => errors.push(error),
        },
    }
    // `None` when the retention is unreadable, so the lease is not compared with it.
    let retention = match &args.retention {
        Some(lit) => parse_retention(lit)
            .map_err(|error| errors.push(error))
            .ok(),
        None => Some(MIN_RETENTION),
    };
    let lease = check_lease(&args, phases_name.as_deref(), retention, &mut errors);
    let key = args
        .key
        .as_ref()
        .and_then(|key| check_key(key).map_err(|error| errors.push(error)).ok());
    if let (Some(phases), Some(tx)) = (&phases_name, &tx_name) {
        errors.push(phases_with_tx(func, phases, tx));
    }

    let model = scope.map(|scope| Model {
        func: {
            let mut func = func.clone();
            normalize_tx_params(&mut func);
            func
        },
        outer_attrs,
        params,
        scope,
        retention: retention.unwrap_or(MIN_RETENTION),
        lease,
        key,
        route: func.attrs.iter().find_map(visible_route),
    });
    match (errors.finish(()), model) {
        (Ok(()), Some(model)) => Ok(model),
        (Err(error), _) => Err(error),
        (Ok(()), None) => unreachable!("a missing or unreadable scope is always reported"),
    }
}

/// A header name must be an HTTP token (RFC 9110, 5.6.2) and not `Idempotency-Key`,
/// which is the key without `key`; a JSON field must be named, and a JSON Pointer's `~`
/// must escape `0` or `1` (RFC 6901).
fn check_key(key: &KeyArg) -> Result<KeySpec, syn::Error> {
    match key {
        KeyArg::Header(lit) => {
            let name = lit.value();
            let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "the header name is empty: write the header that carries the event's id,                      e.g. `header(\"webhook-id\")`",
                ));
            }
            if let Some(bad) = name.chars().find(|&c| !tchar(c)) {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`{name}` is not a header name: {bad:?} is not allowed in one (letters, \
                         digits and !#$%&'*+-.^_`|~ are)"
                    ),
                ));
            }
            if name.eq_ignore_ascii_case("idempotency-key") {
                return Err(syn::Error::new(
                    lit.span(),
                    "`Idempotency-Key` is the key already when `key` is not given: remove `key`",
                ));
            }
            Ok(KeySpec::Header(name.to_ascii_lowercase()))
        }
        KeyArg::Json(lit) => {
            let field = lit.value();
            if field.is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "the JSON field is empty: name the body's member that holds the event's id, \
                     e.g. `json(\"id\")`, or a JSON Pointer such as `json(\"/data/id\")`",
                ));
            }
            let bad_escape = field.starts_with('/')
                && field
                    .match_indices('~')
                    .any(|(at, _)| !matches!(field.as_bytes().get(at + 1), Some(b'0' | b'1')));
            if bad_escape {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`{field}` is not a JSON Pointer: `~` must be followed by `0` (for `~`) \
                         or `1` (for `/`)"
                    ),
                ));
            }
            Ok(KeySpec::Json(field))
        }
    }
}

/// The parameters, with the names of the transaction and phases parameters if any.
struct Params {
    params: Vec<Param>,
    tx_name: Option<String>,
    phases_name: Option<String>,
}

fn params(func: &ItemFn, errors: &mut Errors) -> Params {
    let mut params = Vec::new();
    let mut tx_name: Option<String> = None;
    let mut phases_name: Option<String> = None;
    for input in &func.sig.inputs {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "`#[idempotent]` handlers are free functions: remove the `self` parameter",
                ));
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        let role = Role::of(&arg.ty);
        let name = binding_name(&arg.pat).map_or_else(|| "_".to_owned(), |i| i.to_string());
        if let Some(ty) = borrowed_idem_param(&arg.ty) {
            errors.push(syn::Error::new_spanned(
                &arg.ty,
                format!("take `idem::{ty}` by value: write `{name}: idem::{ty}`"),
            ));
            // Still the phased form's parameter, for the checks of `lease`.
            if ty == "Phases" && phases_name.is_none() {
                phases_name = Some(name.clone());
            }
        }
        let slot = match role {
            Role::Tx => &mut tx_name,
            Role::Phases => &mut phases_name,
            Role::Extractor => &mut None,
        };
        match (role, &*slot) {
            (Role::Extractor, _) => {}
            (_, None) => *slot = Some(name),
            (Role::Tx, Some(first)) => errors.push(syn::Error::new_spanned(
                arg,
                format!(
                    "only one transaction parameter is allowed: `{first}` already receives \
                     it; remove this one"
                ),
            )),
            (Role::Phases, Some(first)) => errors.push(syn::Error::new_spanned(
                arg,
                format!(
                    "only one phases parameter is allowed: `{first}` already runs the phases; \
                     remove this one"
                ),
            )),
        }
        params.push(Param {
            ty: (*arg.ty).clone(),
            role,
        });
    }
    Params {
        params,
        tx_name,
        phases_name,
    }
}

/// The phased form's `lease`: required with a phases parameter, refused without one, at
/// least [`MIN_LEASE`] and at most the retention (when that could be read).
fn check_lease(
    args: &Args,
    phases_name: Option<&str>,
    retention: Option<Duration>,
    errors: &mut Errors,
) -> Option<Duration> {
    match (&args.lease, phases_name) {
        (Some(lit), Some(_)) => {
            let retention = retention.map(|value| (value, args.retention.as_ref()));
            parse_lease(lit, retention)
                .map_err(|error| errors.push(error))
                .ok()
        }
        (Some(lit), None) => {
            errors.push(syn::Error::new(
                lit.span(),
                "`lease` belongs to the phased form: add a parameter `phases: idem::Phases` \
                 and run each step with `phases.run(..)`, or remove `lease`",
            ));
            None
        }
        // An unreadable `lease` was reported already; do not also call it missing.
        (None, Some(phases)) if args.readable && !args.lease_written => {
            errors.push(syn::Error::new(
                args.span,
                format!(
                    "`{phases}: idem::Phases` needs a lease: add e.g. `lease = \"30s\"`, longer \
                     than the handler's longest phase; a retry takes over once it runs out"
                ),
            ));
            None
        }
        (None, _) => None,
    }
}

/// Points at the `Tx` parameter: beside phases, it is the one that cannot work.
fn phases_with_tx(func: &ItemFn, phases: &str, tx: &str) -> syn::Error {
    let message = format!(
        "a phased handler has no single transaction: each phase runs in its own; remove \
         `{tx}` and write through the phase's, e.g. \
         `{phases}.run(\"created\", async |mut tx| ..)`"
    );
    let tx_arg = func.sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(arg) if is_tx(&arg.ty) => Some(arg),
        _ => None,
    });
    match tx_arg {
        Some(arg) => syn::Error::new_spanned(arg, message),
        None => syn::Error::new(func.sig.ident.span(), message),
    }
}

fn binding_name(pat: &Pat) -> Option<&Ident> {
    match pat {
        Pat::Ident(pat) => Some(&pat.ident),
        _ => None,
    }
}

fn scope_index(func: &ItemFn, name: &Ident) -> Result<usize, syn::Error> {
    let mut names = Vec::new();
    for (index, input) in func.sig.inputs.iter().enumerate() {
        let FnArg::Typed(arg) = input else { continue };
        let Some(ident) = binding_name(&arg.pat) else {
            continue;
        };
        let role = Role::of(&arg.ty);
        if ident == name {
            let what = match role {
                Role::Extractor => return Ok(index),
                Role::Tx => "the transaction",
                Role::Phases => "the phases",
            };
            return Err(syn::Error::new(
                name.span(),
                format!(
                    "`{name}` is {what}, which cannot identify the caller: name the parameter \
                     that does, e.g. `scope = account`"
                ),
            ));
        }
        if role == Role::Extractor {
            names.push(format!("`{ident}`"));
        }
    }
    let hint = if names.is_empty() {
        "add a parameter that identifies the caller".to_owned()
    } else {
        format!("the parameters are {}", names.join(", "))
    };
    Err(syn::Error::new(
        name.span(),
        format!(
            "`scope = {name}` names no parameter of `{}`: {hint}",
            func.sig.ident
        ),
    ))
}

fn parse_retention(lit: &LitStr) -> Result<Duration, syn::Error> {
    let text = lit.value();
    let value = humantime::parse_duration(&text).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!(
                "cannot read `{text}` as a duration ({error}): write e.g. \
                 `retention = \"24h\"` or `retention = \"7d\"`"
            ),
        )
    })?;
    if value < MIN_RETENTION {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "retention `{text}` is under 24h: keys must outlive client retries, so keep \
                 them at least a day, e.g. `retention = \"24h\"`"
            ),
        ));
    }
    Ok(value)
}

/// `retention` is what was read from the attribute (`None` when it was unreadable, so
/// the comparison is skipped), with its literal if one was written.
fn parse_lease(
    lit: &LitStr,
    retention: Option<(Duration, Option<&LitStr>)>,
) -> Result<Duration, syn::Error> {
    let text = lit.value();
    let value = humantime::parse_duration(&text).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!("cannot read `{text}` as a duration ({error}): write e.g. `lease = \"30s\"`"),
        )
    })?;
    if value < MIN_LEASE {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "lease `{text}` is under 1s: clients retry after `Retry-After: 1`, so a shorter \
                 lease lets a retry take over an attempt that is still working; write e.g. \
                 `lease = \"30s\"`"
            ),
        ));
    }
    if let Some((retention, written)) = retention
        && value > retention
    {
        let retention = match written {
            Some(lit) => format!("retention `{}`", lit.value()),
            None => "the default retention `24h`".to_owned(),
        };
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "lease `{text}` is longer than {retention}: a key must not expire while an \
                 attempt holds it; shorten the lease (a phase that runs longer can extend it)"
            ),
        ));
    }
    Ok(value)
}

/// `#[get]`, `#[head]` and `#[route(.., method = "GET")]`: methods that are safe already.
fn safe_method_route(attr: &Attribute) -> Option<&'static str> {
    let name = attr.path().segments.last()?.ident.to_string();
    match name.as_str() {
        "get" => Some("GET"),
        "head" => Some("HEAD"),
        "route" => {
            let Meta::List(list) = &attr.meta else {
                return None;
            };
            let text = list.tokens.to_string();
            [("GET", "\"GET\""), ("HEAD", "\"HEAD\"")]
                .into_iter()
                .find(|(_, quoted)| text.contains(&format!("method = {quoted}")))
                .map(|(method, _)| method)
        }
        _ => None,
    }
}

/// `#[post("/orders")]` and friends, as (method, path), for the registry.
fn visible_route(attr: &Attribute) -> Option<(String, LitStr)> {
    let name = attr.path().segments.last()?.ident.to_string();
    let method = match name.as_str() {
        "post" | "put" | "patch" | "delete" | "options" | "trace" | "connect" => {
            name.to_uppercase()
        }
        _ => return None,
    };
    let Meta::List(list) = &attr.meta else {
        return None;
    };
    let path = list.parse_args_with(|input: syn::parse::ParseStream<'_>| {
        let path: LitStr = input.parse()?;
        let _: proc_macro2::TokenStream = input.parse()?;
        Ok(path)
    });
    path.ok().map(|path| (method, path))
}
