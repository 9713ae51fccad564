//! Shapes of syntax the route reader recognises, apart from any reading's context.

use quote::ToTokens;
use syn::visit::Visit;
use syn::{Expr, ExprCall, ExprMethodCall, ExprPath};

use super::{SAFE, UNSAFE};
use crate::audit::index::segments;

pub(super) fn is_ident(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Path(p) if p.path.is_ident(name))
}

pub(super) fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Group(g) => strip(&g.expr),
        Expr::Reference(r) => strip(&r.expr),
        other => other,
    }
}

/// A method-call chain as its root and its calls, first call first.
pub(super) fn unroll(expr: &Expr) -> (&Expr, Vec<&ExprMethodCall>) {
    let mut calls = Vec::new();
    let mut current = strip(expr);
    while let Expr::MethodCall(call) = current {
        calls.push(call);
        current = strip(&call.receiver);
    }
    calls.reverse();
    (current, calls)
}

pub(super) fn call_name(call: &ExprCall) -> Option<String> {
    match &*call.func {
        Expr::Path(ExprPath { path, .. }) => Some(path.segments.last()?.ident.to_string()),
        _ => None,
    }
}

/// `post(f)`, `web::post()`, `on(..)`, `web::method(..)`, `web::to(f)`: the start of a
/// method router or an actix `Route`.
pub(super) fn is_route_value_root(call: &ExprCall) -> bool {
    let Some(name) = call_name(call) else {
        return false;
    };
    let n = call.args.len();
    (axum_method(&name).is_some() && n <= 1 && is_routing_path(call))
        || (name == "on" && n == 2)
        || (name == "method" && n == 1 && method_of(&call.args[0]).is_some())
}

/// `post(..)` is axum's or actix's only as a bare name or under `routing`/`web`: an
/// application's own `orders::post()` is not a route.
pub(super) fn is_routing_path(call: &ExprCall) -> bool {
    let Expr::Path(func) = &*call.func else {
        return false;
    };
    let segments = segments(&func.path);
    segments.len() == 1 || matches!(segments[segments.len() - 2].as_str(), "routing" | "web")
}

/// The upper-case method a router function is named after (`post` is `POST`).
pub(super) fn axum_method(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    (UNSAFE.contains(&upper.as_str()) || SAFE.contains(&upper.as_str())).then_some(upper)
}

/// `Method::POST`, `http::Method::PUT`, `guard::Post()`, `guard::Method(Method::POST)`.
pub(super) fn method_of(expr: &Expr) -> Option<String> {
    match strip(expr) {
        Expr::Path(p) => {
            let segments = segments(&p.path);
            let [.., kind, name] = segments.as_slice() else {
                return None;
            };
            (kind == "Method")
                .then(|| name.to_ascii_uppercase())
                .filter(|m| UNSAFE.contains(&m.as_str()) || SAFE.contains(&m.as_str()))
        }
        Expr::Call(call) => {
            let name = call_name(call)?;
            if name == "Method" {
                return call.args.first().and_then(method_of);
            }
            let upper = name.to_ascii_uppercase();
            (call.args.is_empty()
                && (UNSAFE.contains(&upper.as_str()) || SAFE.contains(&upper.as_str())))
            .then_some(upper)
        }
        _ => None,
    }
}

/// `MethodFilter::POST`, `MethodFilter::POST.or(MethodFilter::PUT)`.
pub(super) fn filter_methods(expr: &Expr) -> Vec<String> {
    let mut methods = Vec::new();
    crate::audit::index::each_ident(&expr.to_token_stream(), &mut |ident| {
        let name = ident.to_string();
        if (UNSAFE.contains(&name.as_str()) || SAFE.contains(&name.as_str()))
            && !methods.contains(&name)
        {
            methods.push(name);
        }
    });
    methods
}

/// The value of `let name = ..;` in `block` (the last one, at any depth).
pub(super) fn local_init<'b>(block: &'b syn::Block, name: &syn::Ident) -> Option<&'b Expr> {
    struct Find<'b, 'n> {
        name: &'n syn::Ident,
        init: Option<&'b Expr>,
    }
    impl<'b> Visit<'b> for Find<'b, '_> {
        fn visit_local(&mut self, node: &'b syn::Local) {
            let pat = match &node.pat {
                syn::Pat::Type(typed) => &*typed.pat,
                other => other,
            };
            if let (syn::Pat::Ident(ident), Some(init)) = (pat, &node.init)
                && ident.ident == *self.name
            {
                self.init = Some(&init.expr);
            }
            syn::visit::visit_local(self, node);
        }
    }
    let mut find = Find { name, init: None };
    find.visit_block(block);
    find.init
}

pub(super) fn tail_expr(block: &syn::Block) -> Option<&Expr> {
    match block.stmts.last()? {
        syn::Stmt::Expr(expr, None) => Some(expr),
        _ => None,
    }
}

/// An expression shortened for a message.
pub(super) fn short(expr: &Expr) -> String {
    let text = expr.to_token_stream().to_string();
    let text = text
        .replace(" :: ", "::")
        .replace(" (", "(")
        .replace(" .", ".");
    if text.chars().count() > 60 {
        format!("{}..", text.chars().take(57).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_read_from_actix_and_http_spellings() {
        let method = |text: &str| method_of(&syn::parse_str(text).unwrap());
        assert_eq!(method("Method::POST").as_deref(), Some("POST"));
        assert_eq!(method("http::Method::DELETE").as_deref(), Some("DELETE"));
        assert_eq!(method("guard::Put()").as_deref(), Some("PUT"));
        assert_eq!(
            method("guard::Method(Method::PATCH)").as_deref(),
            Some("PATCH")
        );
        assert_eq!(method("header::LOCATION"), None);
        let filter = syn::parse_str("MethodFilter::POST.or(MethodFilter::PUT)").unwrap();
        assert_eq!(filter_methods(&filter), ["POST", "PUT"]);
    }
}
