//! Where routes are registered: chains on a router, an actix `App`, `ServiceConfig`,
//! `Scope` or `Resource`, with the prefixes and layers they give what they nest, merge,
//! configure and serve.

use quote::ToTokens;
use syn::visit::Visit;
use syn::{Expr, ExprCall, ExprMethodCall};

use super::syntax::{call_name, is_route_value_root, local_init, short, strip, unroll};
use super::{Cx, Prefix, Walker, join, route_attribute};
use crate::audit::index::{FnDef, Want, line_of};

impl Cx<'_> {
    /// A chain on a router, an actix `App`, `ServiceConfig`, `Scope` or `Resource`.
    pub(super) fn chain(&mut self, node: &ExprMethodCall, prefix: &Prefix) {
        let expr = Expr::MethodCall(node.clone());
        let (root, calls) = unroll(&expr);
        let start = self.out.len();
        // What `.route(path, ..)` and `.service(..)` inside the chain are prefixed with,
        // and the path of a resource's `.route(..)`.
        let mut base = prefix.clone();
        let mut resource: Option<Prefix> = None;
        match root {
            Expr::Call(call) => {
                let name = call_name(call);
                let args: Vec<&Expr> = call.args.iter().collect();
                match (name.as_deref(), args.as_slice()) {
                    (Some("scope"), [path]) => base = join(prefix, self.path_arg(path).as_deref()),
                    (Some("resource"), [path]) => {
                        resource = Some(join(prefix, self.path_arg(path).as_deref()));
                    }
                    _ if is_route_value_root(call) => {
                        // A method router or actix `Route` standing alone (in a `let`, say):
                        // listed with its path unknown.
                        if let Some(entries) = self.route_value(&expr, 0) {
                            for entry in entries {
                                self.push(None, entry);
                            }
                        }
                        return;
                    }
                    _ => self.router_call(call, prefix),
                }
            }
            other => self.walk_expr(other, prefix),
        }
        for call in calls {
            let method = call.method.to_string();
            let args: Vec<&Expr> = call.args.iter().collect();
            match (method.as_str(), args.as_slice()) {
                ("route", [path, value]) => {
                    // Neither a readable path nor a readable route: nothing says this
                    // `.route(..)` is a router's (`self.route(path, value)` in any code).
                    let written = self.path_arg(path);
                    if written.is_none() && self.route_value(value, 0).is_none() {
                        continue;
                    }
                    let path = join(&base, written.as_deref());
                    self.route(path, value);
                }
                ("route", [value]) => {
                    let path = resource.clone().unwrap_or(None);
                    self.route(path, value);
                }
                ("service", [service]) => self.service(service, &base),
                ("configure", [config]) => match strip(config) {
                    Expr::Path(p) => match self.index.resolve(&p.path, self.file, Want::Builder) {
                        Some(id) => self.walk_nested(id, &base),
                        None => self.unresolved(
                            base.clone(),
                            line_of(config),
                            "a configure function the sources do not hold",
                        ),
                    },
                    other => self.walk_expr(other, &base),
                },
                ("nest" | "nest_service", [path, inner]) => {
                    let nested = join(&base, self.path_arg(path).as_deref());
                    self.router_value(inner, &nested);
                }
                ("merge", [inner]) => self.router_value(inner, &base),
                ("layer" | "route_layer", [layer]) => {
                    if let Some(layer) = self.layer(layer) {
                        for row in &mut self.out[start..] {
                            row.layer.get_or_insert_with(|| layer.clone());
                        }
                    }
                }
                _ => {
                    for arg in args {
                        self.walk_expr(arg, &base);
                    }
                }
            }
        }
    }

    /// A call at the root of a chain: a function that builds a router is read with the
    /// chain's context (its layers apply to it); any other call is walked.
    pub(super) fn router_call(&mut self, call: &ExprCall, prefix: &Prefix) {
        if call.args.len() >= 2 && call.args.first().and_then(|a| self.path_arg(a)).is_some() {
            let mut walker = Walker {
                cx: self,
                prefix: prefix.clone(),
                resource: None,
            };
            walker.visit_expr_call(call);
            return;
        }
        if let Expr::Path(func) = &*call.func
            && let Some(id) = self.index.resolve(&func.path, self.file, Want::Builder)
            && builds_routes(&self.index.fns[id])
        {
            self.walk_nested(id, prefix);
        }
        for arg in &call.args {
            self.walk_expr(arg, prefix);
        }
    }

    /// The router of `nest(p, inner)` or `merge(inner)`.
    pub(super) fn router_value(&mut self, inner: &Expr, prefix: &Prefix) {
        // A router bound by `let` in the same function is read from its value.
        if let (Expr::Path(p), Some(&current)) = (strip(inner), self.stack.last())
            && let Some(ident) = p.path.get_ident()
            && let Some(init) = local_init(&self.index.fns[current].block, ident)
            && !matches!(strip(init), Expr::Path(_))
        {
            return self.router_value(init, prefix);
        }
        match strip(inner) {
            Expr::MethodCall(call) => self.chain(call, prefix),
            Expr::Call(call) => {
                let resolved = match &*call.func {
                    Expr::Path(func) => self.index.resolve(&func.path, self.file, Want::Builder),
                    _ => None,
                };
                match resolved {
                    Some(id) => self.walk_nested(id, prefix),
                    None => self.unresolved(
                        prefix.clone(),
                        line_of(inner),
                        "a router built by a function the sources do not hold",
                    ),
                }
                for arg in &call.args {
                    self.walk_expr(arg, prefix);
                }
            }
            other => self.unresolved(
                prefix.clone(),
                line_of(other),
                &format!("a router the reader cannot follow: `{}`", short(other)),
            ),
        }
    }

    pub(super) fn route(&mut self, path: Prefix, value: &Expr) {
        let (root, _) = unroll(value);
        if let (Expr::Path(p), Some(&current)) = (root, self.stack.last())
            && let Some(ident) = p.path.get_ident()
            && ident
                .to_string()
                .starts_with(|c: char| c.is_lowercase() || c == '_')
        {
            // A `let` of the same function: its value is the route.
            if std::ptr::eq(root, strip(value))
                && let Some(init) = local_init(&self.index.fns[current].block, ident)
                && !matches!(strip(init), Expr::Path(_))
            {
                return self.route(path, init);
            }
            let line = line_of(value);
            self.unresolved(
                path,
                line,
                &format!("the route is passed through the variable `{ident}`"),
            );
            if let Some(row) = self.out.last_mut() {
                row.via_param = Some(current);
            }
            return;
        }
        match self.route_value(value, 0) {
            Some(entries) => {
                for entry in entries {
                    self.push(path.clone(), entry);
                }
            }
            None => self.unresolved(
                path,
                line_of(value),
                &format!("a route the reader cannot follow: `{}`", short(value)),
            ),
        }
    }

    pub(super) fn service(&mut self, service: &Expr, prefix: &Prefix) {
        match strip(service) {
            Expr::Path(p) => {
                if let Some(id) = self.index.resolve(&p.path, self.file, Want::Handler)
                    && route_attribute(&self.index.fns[id]).is_some()
                {
                    self.services.push((self.origin, id, prefix.clone()));
                }
            }
            Expr::Macro(m) if m.mac.path.is_ident("services") => {
                let paths = m.mac.parse_body_with(
                    syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
                );
                for path in paths.into_iter().flatten() {
                    if let Some(id) = self.index.resolve(&path, self.file, Want::Handler) {
                        self.services.push((self.origin, id, prefix.clone()));
                    }
                }
            }
            other => self.walk_expr(other, prefix),
        }
    }
}

/// A function whose body registers routes (a `.route(`, `.nest(` or `.service(` call).
pub(super) fn builds_routes(def: &FnDef) -> bool {
    let tokens = def.block.to_token_stream();
    ["route", "nest", "service", "merge", "configure"]
        .iter()
        .any(|name| crate::audit::index::mentions(&tokens, name))
}
