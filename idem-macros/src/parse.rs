//! Reads `#[idempotent(..)]` arguments, keeping each value's span.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Meta, Token};

/// The valid argument names, as listed in error messages.
const KEYS: &str = "`scope`, `retention`, `lease` or `key`";

/// The arguments as written; not yet checked against the handler.
pub(crate) struct Args {
    /// `scope = <ident>`.
    pub(crate) scope: Option<Ident>,
    /// `retention = "<duration>"`.
    pub(crate) retention: Option<LitStr>,
    /// `lease = "<duration>"`: the phased form.
    pub(crate) lease: Option<LitStr>,
    /// Whether `lease` was written at all, even with an unreadable value: then a missing
    /// lease is not reported on top.
    pub(crate) lease_written: bool,
    /// `key = header("..")` or `key = json("..")`: a webhook event's id is the key.
    pub(crate) key: Option<KeyArg>,
    /// Span of the whole argument list, for "missing argument" errors.
    pub(crate) span: Span,
    /// False when the list could not be read at all, so what is absent is unknown.
    pub(crate) readable: bool,
}

/// Parses the attribute arguments. Errors go to `errors` and the arguments that could
/// be read are still returned, so the handler is checked against them too.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
    let span = if tokens.is_empty() {
        Span::call_site()
    } else {
        tokens.span()
    };
    let mut args = Args {
        scope: None,
        retention: None,
        lease: None,
        lease_written: false,
        key: None,
        span,
        readable: true,
    };
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens) {
        Ok(metas) => metas,
        Err(error) => {
            errors.push(error);
            args.readable = false;
            return args;
        }
    };
    for meta in metas {
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
        match name.to_string().as_str() {
            "scope" => match parameter_name(&pair.value) {
                Some(ident) => set_once(&mut args.scope, ident, name, errors),
                None => errors.push(syn::Error::new_spanned(
                    &pair.value,
                    "`scope` takes the name of a handler parameter, e.g. `scope = account`",
                )),
            },
            "retention" => match duration_literal(&pair.value) {
                Some(lit) => set_once(&mut args.retention, lit, name, errors),
                None => errors.push(syn::Error::new_spanned(
                    &pair.value,
                    "`retention` takes a duration string, e.g. `retention = \"24h\"`",
                )),
            },
            "lease" => {
                args.lease_written = true;
                match duration_literal(&pair.value) {
                    Some(lit) => set_once(&mut args.lease, lit, name, errors),
                    None => errors.push(syn::Error::new_spanned(
                        &pair.value,
                        "`lease` takes a duration string, e.g. `lease = \"30s\"`",
                    )),
                }
            }
            "key" => match key_source(&pair.value) {
                Ok(key) => set_once(&mut args.key, key, name, errors),
                Err(error) => errors.push(error),
            },
            _ => errors.push(unknown(&pair.path)),
        }
    }
    args
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

fn key_source(value: &Expr) -> Result<KeyArg, syn::Error> {
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
        (Some(arg), None) => match duration_literal(arg) {
            Some(lit) => Ok(make(lit)),
            None => Err(syn::Error::new_spanned(
                arg,
                format!("`{func}(..)` takes a string literal: write {KEY_FORMS}"),
            )),
        },
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

fn duration_literal(value: &Expr) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        _ => None,
    }
}

fn parameter_name(value: &Expr) -> Option<Ident> {
    match value {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => path.get_ident().cloned(),
        _ => None,
    }
}

fn unknown(path: &syn::Path) -> syn::Error {
    let name = quote::quote!(#path).to_string().replace(' ', "");
    syn::Error::new_spanned(path, format!("unknown argument `{name}`: expected {KEYS}"))
}

/// One helper for "given more than once", so every argument reports it the same way.
fn set_once<T>(slot: &mut Option<T>, value: T, name: &Ident, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            name.span(),
            format!("`{name}` is given more than once: keep one"),
        ));
    } else {
        *slot = Some(value);
    }
}

/// Collects errors so a user sees all of them in one build.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn finish<T>(self, value: T) -> Result<T, syn::Error> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(value),
        }
    }
}
