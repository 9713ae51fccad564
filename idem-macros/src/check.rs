//! Checks the arguments against the handler and resolves the facts of its model.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ItemFn, LitStr, Type, Visibility};

use crate::above;
use crate::axum_rules::{axum_route_attribute, axum_rules};
use crate::backend::{backend, borrowed_backend, checked_backend, is_type_param, unnamed_backend};
use crate::errors::Errors;
use crate::exempt;
use crate::model::{Expansion, Fallback, Framework, Model, Param, Rejected, Scope, Shell, UNNAMED};
use crate::parse::{Arg, Args, KeyArg};
use crate::syntax::{self, AttrKind, Role};
use crate::validate;

mod store;

use store::{lease, store_rules};

/// Checks everything, reporting every independent problem together. Errors point at
/// the tokens of the function as written.
pub(crate) fn check(
    framework: Framework,
    args: Args,
    func: ItemFn,
    mut errors: Errors,
) -> Expansion {
    let krate = match &args.krate {
        Arg::Given(path) => path.clone(),
        Arg::Absent | Arg::Unreadable => syn::parse_quote!(::idem),
    };
    must_be_async(framework, &func, &mut errors);
    let attrs = attributes(framework, &func, &mut errors);
    let params = params(framework, &func, &mut errors);
    framework_rules(framework, &args, &func, &params, &mut errors);
    let scope = scope(&args, &func, &mut errors);
    let retention = retention(&args, &mut errors);
    let redis = args.store.given().is_some();
    store_rules(&args, &params, &mut errors);
    let lease = lease(&args, &params, retention, &mut errors);
    let key = key(&args, &func, scope.as_ref(), &mut errors);
    conflicting_params(&args, &params, &mut errors);
    let alias_reports = borrowed_params(&params, &mut errors);
    // Keys in Redis name no database; a `Tx` or `Phases` beside `store = redis` is an
    // error, and still gets the alias its type names, so it adds no other.
    // `Steps`, or a `store` that could not be read, says the same: whatever else is
    // wrong, no database is to be named.
    let no_database = redis || matches!(args.store, Arg::Unreadable) || params.steps.is_some();
    let unnamed = if no_database && params.tx.is_none() && params.phases.is_none() {
        None
    } else {
        unnamed_database(&krate, &args, &func, &params, alias_reports)
    };
    let shell = {
        let mut inner = func.clone();
        syntax::normalize_params(
            &mut inner,
            |ty| {
                let span = ty.span().resolved_at(Span::mixed_site());
                Type::Verbatim(Ident::new(UNNAMED, span).into_token_stream())
            },
            // A database that is the handler's type parameter stays as written: the
            // projection would hide it from inference where the handler calls the
            // user's function, and the parameter's own bound is what checks it.
            |database| {
                if is_type_param(&func.sig.generics, database) {
                    database.clone()
                } else {
                    let span = database.span().resolved_at(Span::mixed_site());
                    Type::Verbatim(Ident::new(UNNAMED, span).into_token_stream())
                }
            },
        );
        // A borrowed one's database is the alias's too, so that the alias's error (or
        // the database named elsewhere) is all its type adds.
        if unnamed.is_some() {
            syntax::borrowed_backends(&mut inner, |ty| {
                let span = ty.span().resolved_at(Span::mixed_site());
                Type::Verbatim(Ident::new(UNNAMED, span).into_token_stream())
            });
        }
        inner.attrs = attrs.inner;
        inner.vis = Visibility::Inherited;
        Shell {
            attrs: attrs.outer,
            vis: func.vis.clone(),
            inner,
            unnamed: unnamed.clone(),
        }
    };
    let error = errors.finish();
    match (scope, error) {
        // A borrowed `Tx` or `Phases` is always a mistake, reported above or by the alias.
        (Some(scope), None) if params.borrowed.is_empty() => Expansion::Handler(Model {
            framework,
            backend: backend(&krate, &args, &func, &params.params, unnamed.is_some()),
            state: match &args.state {
                Arg::Given((_, ty)) => Some(ty.to_token_stream()),
                Arg::Absent | Arg::Unreadable => None,
            },
            krate,
            shell,
            params: params.params,
            scope,
            retention: retention.unwrap_or(validate::MIN_RETENTION),
            lease,
            redis,
            key,
            route: attrs.route,
        }),
        (_, error) => {
            // Every path that leaves the scope unresolved reports why; the default only
            // keeps a missed one from passing silently. With none, a borrowed `Tx` or
            // `Phases` is what the alias reports.
            let error = error.or_else(|| {
                params
                    .borrowed
                    .is_empty()
                    .then(|| syn::Error::new(args.span, "`scope` is required"))
            });
            let fallback = if params.has_receiver {
                Fallback::AsWritten(func)
            } else {
                Fallback::Nested(shell)
            };
            Expansion::Rejected(Rejected {
                framework,
                krate,
                error,
                fallback,
            })
        }
    }
}

fn must_be_async(framework: Framework, func: &ItemFn, errors: &mut Errors) {
    if func.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            func.sig.fn_token.span,
            format!(
                "{} handlers must be `async fn`: write `async fn`",
                framework.attribute()
            ),
        ));
    }
}

/// What only one framework allows: axum's rules for its extractors, and `state`, which
/// actix-web has no use for.
fn framework_rules(
    framework: Framework,
    args: &Args,
    func: &ItemFn,
    params: &Params,
    errors: &mut Errors,
) {
    if framework == Framework::Axum {
        axum_rules(func, &params.params, errors);
    } else if let Arg::Given((name, _)) = &args.state {
        errors.push(syn::Error::new(
            name.span(),
            "`state` is an argument of axum handlers (`#[idem::axum::idempotent(state = ..)]`); \
             actix-web has no router state: remove it, and take app data with an extractor \
             such as `web::Data<T>`",
        ));
    }
}

/// The retention, checked; `None` when it is unreadable, so the lease is not compared
/// with it.
fn retention(args: &Args, errors: &mut Errors) -> Option<Duration> {
    match &args.retention {
        Arg::Given(lit) => validate::retention(lit)
            .map_err(|error| errors.push(error))
            .ok(),
        Arg::Absent => Some(validate::MIN_RETENTION),
        Arg::Unreadable => None,
    }
}

/// The key source, checked, and checked against the scope: a signed webhook's key must
/// be what its sender signed.
fn key(
    args: &Args,
    func: &ItemFn,
    scope: Option<&Scope>,
    errors: &mut Errors,
) -> Option<validate::KeySpec> {
    let key = args
        .key
        .given()
        .and_then(|key| validate::key(key).map_err(|error| errors.push(error)).ok());
    if let Some(scope) = scope {
        signed_key(args, func, scope, key.as_ref(), errors);
    }
    key
}

/// Parameters that cannot go together: `Phases` beside `Tx`, and `backend = ..` beside
/// a parameter whose type names the database.
fn conflicting_params(args: &Args, params: &Params, errors: &mut Errors) {
    if let (Some(phases), Some(tx)) = (&params.phases, &params.tx) {
        errors.push(phases_with_tx(phases, tx));
    }
    if let (Arg::Given(backend), Some(param)) =
        (&args.backend, params.tx.as_ref().or(params.phases.as_ref()))
    {
        errors.push(backend_beside_param(backend, param));
    }
}

/// Reports each `Tx` or `Phases` taken by reference, but the one the alias reports;
/// returns that one's index.
fn borrowed_params(params: &Params, errors: &mut Errors) -> Option<usize> {
    let by_value = params.params.iter().find(|p| p.role.names_database());
    // A `Tx` or `Phases` taken by reference is reported at its type. The first that names
    // no database, when no parameter taken by value gives the alias, is reported by the
    // alias (`borrowed_backend`): only the runtime knows whether to say to name one too.
    let alias_reports = by_value
        .is_none()
        .then(|| {
            params
                .borrowed
                .iter()
                .position(|b| !syntax::names_backend(&b.elem))
        })
        .flatten();
    for (index, borrowed) in params.borrowed.iter().enumerate() {
        if Some(index) != alias_reports {
            let ty = borrowed.role.type_name();
            errors.push(syn::Error::new_spanned(
                &borrowed.ty,
                format!(
                    "take `idem::{ty}` by value: write `{}: idem::{ty}`",
                    borrowed.name
                ),
            ));
        }
    }
    alias_reports
}

/// The alias that names the handler's database, or reports that it names none.
fn unnamed_database(
    krate: &syn::Path,
    args: &Args,
    func: &ItemFn,
    params: &Params,
    alias_reports: Option<usize>,
) -> Option<TokenStream> {
    // The first parameter that names no database decides the message; a handler with
    // neither kind of parameter and no `backend = ..` names none either.
    let by_value = params.params.iter().find(|p| p.role.names_database());
    match by_value {
        Some(param) if !syntax::names_backend(&param.ty) => {
            let (first, last) = syntax::first_and_last(&param.ty);
            Some(unnamed_backend(krate, param.role, first, last))
        }
        // A database named as written is checked once, in the alias.
        Some(param) => syntax::backend_arg(&param.ty)
            .filter(|database| !is_type_param(&func.sig.generics, database))
            .map(|database| checked_backend(krate, database)),
        // Not "this handler names no database" beside a borrowed one: its type is where
        // the database goes, and its own error says so.
        None if !params.borrowed.is_empty() => alias_reports.map(|index| {
            let borrowed = &params.borrowed[index];
            let (first, last) = syntax::first_and_last(&borrowed.ty);
            borrowed_backend(krate, borrowed.role, &borrowed.name, first, last)
        }),
        None => match &args.backend {
            Arg::Absent => Some(unnamed_backend(krate, Role::Extractor, args.span, args.end)),
            Arg::Given(database) => Some(checked_backend(krate, database)),
            // Unreadable: the list's error is reported, and whether it named a backend
            // is unknown.
            Arg::Unreadable => None,
        },
    }
}

/// The function's attributes, sorted by the function they belong on.
struct Attrs {
    outer: Vec<Attribute>,
    inner: Vec<Attribute>,
    route: Option<(String, LitStr)>,
}

fn attributes(framework: Framework, func: &ItemFn, errors: &mut Errors) -> Attrs {
    let mut attrs = Attrs {
        outer: Vec::new(),
        inner: Vec::new(),
        route: None,
    };
    for attr in &func.attrs {
        match syntax::classify(attr) {
            // axum has no route attributes: an actix-web one here would register the
            // handler with actix-web, which an axum handler is not.
            AttrKind::Route(_) if framework == Framework::Axum => {
                errors.push(axum_route_attribute(attr, &func.sig.ident));
            }
            AttrKind::Route(_) => attrs.outer.push(attr.clone()),
            // Dropped from both functions too: the handler would be listed twice.
            AttrKind::Exempt => errors.push(exempt::beside_idempotent(attr, &func.sig.ident)),
            // Dropped from both functions, so that it does not expand a second time.
            AttrKind::Idempotent => errors.push(syn::Error::new_spanned(
                attr,
                format!(
                    "`#[idempotent]` is written twice on `{}`: remove this one",
                    func.sig.ident
                ),
            )),
            AttrKind::Lint => {
                attrs.outer.push(attr.clone());
                attrs.inner.push(attr.clone());
            }
            AttrKind::Outer => attrs.outer.push(attr.clone()),
            AttrKind::Inner => attrs.inner.push(attr.clone()),
        }
    }
    // An axum handler's route attributes were reported above, and it has no route.
    let mut routes = match framework {
        Framework::Actix => syntax::routes(&func.attrs),
        Framework::Axum => Vec::new(),
    };
    // A route attribute written above `#[idempotent]` has expanded already and kept the
    // function: only the source file still shows it. Its methods are checked the same
    // way; its errors point at `#[idempotent]`, since the tokens read back from the file
    // carry no place of their own.
    for attr in above::attributes_above(func, |kind| matches!(kind, AttrKind::Idempotent)) {
        match syntax::classify(&attr) {
            AttrKind::Route(_) if framework == Framework::Axum => {
                errors.push(axum_route_attribute(&attr, &func.sig.ident));
            }
            AttrKind::Route(route) => {
                routes.extend(route.methods.into_iter().map(|mut method| {
                    method.span = Span::call_site();
                    (method, route.path.clone())
                }));
            }
            _ => {}
        }
    }
    let several = routes.len() > 1;
    for (method, _) in routes.iter().filter(|(method, _)| method.safe) {
        errors.push(validate::safe_method(method, several));
    }
    attrs.route = syntax::single_route(&routes);
    attrs
}

/// The parameters, with the transaction and phases parameters if any.
struct Params {
    params: Vec<Param>,
    tx: Option<Named>,
    phases: Option<Named>,
    steps: Option<Named>,
    has_receiver: bool,
    /// Each `Tx` or `Phases` taken by reference, in order: one error each.
    borrowed: Vec<Borrowed>,
}

/// A `&idem::Tx` or `&mut idem::Phases` parameter, which idem cannot pass.
struct Borrowed {
    role: Role,
    name: String,
    /// The parameter's type, as written.
    ty: Type,
    /// The `Tx` or `Phases` it borrows.
    elem: Type,
}

/// A parameter's name and its tokens, for messages about it.
struct Named {
    name: String,
    tokens: TokenStream,
}

fn params(framework: Framework, func: &ItemFn, errors: &mut Errors) -> Params {
    let mut params = Params {
        params: Vec::new(),
        tx: None,
        phases: None,
        steps: None,
        has_receiver: false,
        borrowed: Vec::new(),
    };
    for input in &func.sig.inputs {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    format!(
                        "{} handlers are free functions: remove the `self` parameter",
                        framework.attribute()
                    ),
                ));
                params.has_receiver = true;
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        let role = Role::of(&arg.ty);
        let named = Named {
            name: syntax::binding(&arg.pat).map_or_else(|| "_".to_owned(), Ident::to_string),
            tokens: quote!(#arg),
        };
        if let (Some(borrowed), Type::Reference(reference)) = (Role::of_borrowed(&arg.ty), &*arg.ty)
        {
            params.borrowed.push(Borrowed {
                role: borrowed,
                name: named.name.clone(),
                ty: (*arg.ty).clone(),
                elem: (*reference.elem).clone(),
            });
            // Still the phased form's parameter, for the checks of `lease`.
            if borrowed == Role::Phases && params.phases.is_none() {
                params.phases = Some(named);
            }
        } else {
            let (slot, what) = match role {
                Role::Tx => (&mut params.tx, "transaction parameter"),
                Role::Phases => (&mut params.phases, "phases parameter"),
                Role::Steps => (&mut params.steps, "steps parameter"),
                Role::Extractor => (&mut None, ""),
            };
            match (role, &*slot) {
                (Role::Extractor, _) => {}
                (_, None) => *slot = Some(named),
                (_, Some(first)) => {
                    let does = match role {
                        Role::Tx => "already receives it",
                        Role::Steps => "already runs the steps",
                        _ => "already runs the phases",
                    };
                    errors.push(syn::Error::new_spanned(
                        arg,
                        format!(
                            "only one {what} is allowed: `{}` {does}; remove this one",
                            first.name
                        ),
                    ));
                }
            }
        }
        params.params.push(Param {
            ty: (*arg.ty).clone(),
            role,
        });
    }
    params
}

/// The scope parameter, or `None` after reporting why there is none.
fn scope(args: &Args, func: &ItemFn, errors: &mut Errors) -> Option<Scope> {
    let name = match &args.scope {
        Arg::Given(name) => name,
        // Its value was unreadable, and that was reported.
        Arg::Unreadable => return None,
        Arg::Absent => {
            errors.push(syn::Error::new(
                args.span,
                "`scope` is required: name the parameter that identifies the caller, \
                 e.g. `scope = account`",
            ));
            return None;
        }
    };
    let mut names = Vec::new();
    for (index, input) in func.sig.inputs.iter().enumerate() {
        let FnArg::Typed(arg) = input else { continue };
        let Some(ident) = syntax::binding(&arg.pat) else {
            continue;
        };
        let role = Role::of(&arg.ty);
        if ident == name {
            let what = match role {
                Role::Extractor if syntax::is_body(&arg.ty) => {
                    errors.push(syn::Error::new_spanned(
                        &arg.ty,
                        format!(
                            "`{name}` is the request body, which the client chooses, so it \
                             cannot identify the caller: scope by an authenticated caller, \
                             e.g. `scope = account` with `account: Account` from your \
                             authentication"
                        ),
                    ));
                    return None;
                }
                Role::Extractor => {
                    return Some(Scope {
                        index,
                        name: ident.clone(),
                    });
                }
                Role::Tx => "the transaction",
                Role::Phases => "the phases",
                Role::Steps => "the steps",
            };
            errors.push(syn::Error::new(
                name.span(),
                format!(
                    "`{name}` is {what}, which cannot identify the caller: name the parameter \
                     that does, e.g. `scope = account`"
                ),
            ));
            return None;
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
    errors.push(syn::Error::new(
        name.span(),
        format!(
            "`scope = {name}` names no parameter of `{}`: {hint}",
            func.sig.ident
        ),
    ));
    None
}

/// A handler scoped by `SignedWebhook` takes its key from what the sender signed: the
/// `webhook-id` header or a field of the body. A key from `Idempotency-Key` or another
/// header is not signed, so a captured delivery resent under fresh keys would run the
/// handler once per key.
fn signed_key(
    args: &Args,
    func: &ItemFn,
    scope: &Scope,
    key: Option<&validate::KeySpec>,
    errors: &mut Errors,
) {
    let Some(FnArg::Typed(param)) = func.sig.inputs.iter().nth(scope.index) else {
        return;
    };
    if !syntax::is_signed_webhook(&param.ty) {
        return;
    }
    let fix = |what: &str| {
        format!(
            "`{}` is scoped by a signed webhook but takes its key from {what}, which the \
             sender did not sign: anyone holding one captured delivery could resend it under \
             fresh keys and run the handler each time; write `key = header(\"webhook-id\")`, \
             or `key = json(\"..\")` for an id in the signed body",
            func.sig.ident
        )
    };
    match (&args.key, key) {
        (Arg::Absent, _) => errors.push(syn::Error::new_spanned(
            &param.ty,
            fix("the `Idempotency-Key` header"),
        )),
        (Arg::Given(KeyArg::Header(lit)), Some(validate::KeySpec::Header(name)))
            if name != "webhook-id" =>
        {
            errors.push(syn::Error::new(
                lit.span(),
                fix(&format!("the `{name}` header")),
            ));
        }
        // A `json(..)` key is in the signed body; an unreadable one was reported.
        _ => {}
    }
}

/// Points at `backend = ..` beside a `Tx` or `Phases`: the parameter's type names the
/// database, and two places naming it could disagree.
fn backend_beside_param(backend: &Type, param: &Named) -> syn::Error {
    syn::Error::new_spanned(
        backend,
        format!(
            "`backend` names the database of a handler without `idem::Tx` or \
             `idem::Phases`; this one's is the type parameter of `{}`: remove `backend` \
             and write e.g. `idem::Tx<'_, sqlx::Sqlite>`",
            param.name
        ),
    )
}

/// Points at the `Tx` parameter: beside phases, it is the one that cannot work.
fn phases_with_tx(phases: &Named, tx: &Named) -> syn::Error {
    syn::Error::new_spanned(
        &tx.tokens,
        format!(
            "a phased handler has no single transaction: each phase runs in its own; remove \
             `{}` and write through the phase's, e.g. `{}.run(\"created\", async |mut tx| ..)`",
            tx.name, phases.name
        ),
    )
}
