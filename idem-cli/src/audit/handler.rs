//! What a handler's own syntax says: its idem attribute (`#[idempotent(..)]`,
//! `#[idem::axum::idempotent(..)]`, `#[idem::exempt("..")]`), the phases it records, and,
//! for an unprotected one, which mechanism the seed's table suggests.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Attribute, FnArg, Type};

use super::index::{FnDef, Index, Want, each_ident, flatten, string_literals};

/// The default key source: the `Idempotency-Key` header.
pub(crate) const DEFAULT_KEY: &str = "header(\"Idempotency-Key\")";

/// `#[idempotent(..)]` as written on a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Idempotent {
    pub(crate) scope: Option<String>,
    /// As written (`"24h"`), or the attribute's default.
    pub(crate) retention: String,
    /// `header("webhook-id")`, `json("id")`, or [`DEFAULT_KEY`].
    pub(crate) key: String,
    /// Whether the key is an event's id (`key = ..` given): a webhook receiver.
    pub(crate) webhook: bool,
    pub(crate) phased: bool,
    /// `store = redis`: the keys and the steps' outputs live in Redis.
    pub(crate) redis: bool,
}

/// The idem attribute on a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attr {
    Idempotent(Idempotent),
    Exempt(String),
}

/// Reads the handler's idem attribute, if it has one.
pub(crate) fn attribute(def: &FnDef) -> Option<Attr> {
    def.attrs.iter().find_map(|attr| read(attr, def))
}

fn read(attr: &Attribute, def: &FnDef) -> Option<Attr> {
    let name = attr.path().segments.last()?.ident.to_string();
    let tokens = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    match name.as_str() {
        "idempotent" | "idempotent_axum" => Some(Attr::Idempotent(idempotent(tokens, def))),
        "exempt" => {
            let mut literals = Vec::new();
            string_literals(&tokens, &mut literals);
            Some(Attr::Exempt(
                literals.into_iter().next().unwrap_or_default(),
            ))
        }
        _ => None,
    }
}

fn idempotent(tokens: TokenStream, def: &FnDef) -> Idempotent {
    let mut args = Idempotent {
        scope: None,
        retention: "24h".into(),
        key: DEFAULT_KEY.into(),
        webhook: false,
        phased: false,
        redis: false,
    };
    // Split at top-level commas: `name = value` each; a value may be a type with generic
    // arguments (`state = AppState<Shop>`), which is no expression, so no `Meta` parse.
    let mut pieces: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for tree in tokens {
        match &tree {
            TokenTree::Punct(p) if p.as_char() == ',' => pieces.push(Vec::new()),
            _ => pieces.last_mut().expect("one piece at least").push(tree),
        }
    }
    for piece in pieces {
        let [TokenTree::Ident(name), TokenTree::Punct(eq), value @ ..] = piece.as_slice() else {
            continue;
        };
        if eq.as_char() != '=' {
            continue;
        }
        let value: TokenStream = value.iter().cloned().collect();
        let text = compact(&value);
        match name.to_string().as_str() {
            "scope" => args.scope = Some(text),
            "retention" => args.retention = text.trim_matches('"').to_owned(),
            "lease" => args.phased = true,
            "store" => args.redis = text == "redis",
            "key" => {
                args.key = text;
                args.webhook = true;
            }
            _ => {}
        }
    }
    // The phased form is the one with a `Phases` parameter (the lease is then required).
    if phases_param(def).is_some() {
        args.phased = true;
    }
    args
}

/// Tokens as one would write them: no spaces around `(`, `)`, `::` or `.`.
fn compact(tokens: &TokenStream) -> String {
    tokens
        .to_string()
        .replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" :: ", "::")
        .replace(" .", ".")
}

/// The name of the handler's `Phases` parameter, or of its `Steps` one (keys in Redis),
/// whose `run` and `derived_key` read alike.
fn phases_param(def: &FnDef) -> Option<String> {
    def.sig.inputs.iter().find_map(|input| {
        let FnArg::Typed(typed) = input else {
            return None;
        };
        if !type_names(&typed.ty, "Phases") && !type_names(&typed.ty, "Steps") {
            return None;
        }
        match &*typed.pat {
            syn::Pat::Ident(ident) => Some(ident.ident.to_string()),
            _ => Some(String::new()),
        }
    })
}

fn type_names(ty: &Type, name: &str) -> bool {
    let mut found = false;
    each_ident(&ty.to_token_stream(), &mut |ident| found |= ident == name);
    found
}

/// The phase names a phased handler records (`phases.run("charged", ..)`) and the steps
/// it derives keys for (`phases.derived_key("charge")`), in order of appearance, first
/// in its body, then in the functions it hands its `Phases` to (by name, as far as the
/// sources go).
pub(crate) fn phase_names(index: &Index, def: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut seen = vec![def];
    let mut queue = vec![(def, phases_param(&index.fns[def]))];
    while let Some((id, param)) = queue.pop() {
        let Some(param) = param else { continue };
        let tokens = index.fns[id].block.to_token_stream();
        let trees: Vec<TokenTree> = flatten(&tokens);
        for (i, tree) in trees.iter().enumerate() {
            let TokenTree::Ident(ident) = tree else {
                continue;
            };
            let method = ident.to_string();
            // `.run("name"` and `.derived_key("step"`.
            if matches!(method.as_str(), "run" | "derived_key")
                && matches!(trees.get(i.wrapping_sub(1)), Some(TokenTree::Punct(p)) if p.as_char() == '.')
                && let Some(TokenTree::Group(args)) = trees.get(i + 1)
                && let Some(TokenTree::Literal(lit)) = args.stream().into_iter().next()
                && let Ok(syn::Lit::Str(name)) = syn::parse2::<syn::Lit>(lit.into_token_stream())
                && !names.contains(&name.value())
            {
                names.push(name.value());
            }
        }
        // A call that is given the parameter: `pay(account, &mut phases, ..)`.
        for call in calls_given(&tokens, &param) {
            if let Some(next) = index.resolve(&call, index.fns[id].file, Want::Handler)
                && !seen.contains(&next)
            {
                seen.push(next);
                queue.insert(0, (next, phases_param(&index.fns[next])));
            }
        }
    }
    names
}

/// The paths of the calls in `tokens` whose arguments mention `param`.
fn calls_given(tokens: &TokenStream, param: &str) -> Vec<syn::Path> {
    let mut calls = Vec::new();
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        if let TokenTree::Group(g) = tree {
            let mentions = super::index::mentions(&g.stream(), param);
            if mentions && g.delimiter() == proc_macro2::Delimiter::Parenthesis {
                // The path just before the parentheses: `a::b::f` or `f`.
                let mut start = i;
                while start > 0 {
                    match &trees[start - 1] {
                        TokenTree::Ident(_) => start -= 1,
                        TokenTree::Punct(p) if p.as_char() == ':' => start -= 1,
                        _ => break,
                    }
                }
                let method_call = start > 0
                    && matches!(&trees[start - 1], TokenTree::Punct(p) if p.as_char() == '.');
                if method_call || start == i {
                    calls.extend(calls_given(&g.stream(), param));
                    continue;
                }
                let path: TokenStream = trees[start..i].iter().cloned().collect();
                if let Ok(path) = syn::parse2::<syn::Path>(path) {
                    calls.push(path);
                }
            }
            calls.extend(calls_given(&g.stream(), param));
        }
    }
    calls
}

/// The seed's mechanism for an unprotected route, from what its handler's body shows.
pub(crate) fn suggestion(method: &str, path: Option<&str>, def: Option<&FnDef>) -> String {
    if let Some(def) = def {
        let tokens = def.block.to_token_stream();
        let mut http_client = false;
        let trees = flatten(&tokens);
        for (i, tree) in trees.iter().enumerate() {
            if let TokenTree::Ident(ident) = tree {
                let dotted = matches!(trees.get(i.wrapping_sub(1)), Some(TokenTree::Punct(p)) if p.as_char() == '.');
                http_client |= ident == "reqwest" || (dotted && ident == "send");
            }
        }
        if http_client {
            return "phased form with derived keys".into();
        }
        let mut literals = Vec::new();
        string_literals(&tokens, &mut literals);
        let natural = literals.iter().any(|sql| {
            let sql = sql.to_ascii_uppercase();
            (sql.contains("INSERT") && sql.contains("ON CONFLICT")) || sql.contains("UNIQUE")
        });
        if natural {
            return "natural key".into();
        }
    }
    let keyed_by_id = path.is_some_and(|path| {
        path.split('/')
            .any(|segment| segment.starts_with('{') || segment.starts_with(':'))
    });
    if matches!(method, "PUT" | "DELETE") && keyed_by_id {
        return "client-generated id".into();
    }
    "Idempotency-Key table".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_table_by_method_and_path_alone() {
        assert_eq!(
            suggestion("PUT", Some("/carts/{id}"), None),
            "client-generated id"
        );
        assert_eq!(
            suggestion("DELETE", Some("/users/:id"), None),
            "client-generated id"
        );
        assert_eq!(
            suggestion("POST", Some("/orders/{id}/refunds"), None),
            "Idempotency-Key table"
        );
        assert_eq!(
            suggestion("PUT", Some("/settings"), None),
            "Idempotency-Key table"
        );
        assert_eq!(suggestion("DELETE", None, None), "Idempotency-Key table");
    }
}
