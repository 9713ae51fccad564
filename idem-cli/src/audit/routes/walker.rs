//! The walk of a function's expressions that finds the places routes may be registered.

use syn::visit::Visit;
use syn::{Expr, ExprCall, ExprMethodCall};

use super::syntax::{call_name, is_route_value_root, method_of, short, strip, unroll};
use super::{Cx, Entry, Handler, Prefix, join};
use crate::audit::index::{Want, line_of};

/// A generic walk of expressions: each method-call chain met is read as a possible
/// router; a call with a path first and `(Method::POST, web::to(f))` pairs among its
/// arguments (an application's own `resource(path, routes)` helper) as a resource.
pub(super) struct Walker<'c, 'a> {
    pub(super) cx: &'c mut Cx<'a>,
    pub(super) prefix: Prefix,
    /// The path of the helper call being walked, for its `(Method, route)` pairs.
    pub(super) resource: Option<Prefix>,
}

impl<'ast> Visit<'ast> for Walker<'_, '_> {
    fn visit_expr_method_call(&mut self, node: &'ast ExprMethodCall) {
        self.cx.chain(node, &self.prefix);
    }

    fn visit_expr_call(&mut self, node: &'ast ExprCall) {
        let first = node.args.first().and_then(|arg| self.cx.path_arg(arg));
        if node.args.len() >= 2 && first.is_some() {
            if let Expr::Path(func) = &*node.func
                && let Some(helper) = self
                    .cx
                    .index
                    .resolve(&func.path, self.cx.file, Want::Builder)
            {
                self.cx.helpers.insert(helper);
            }
            let saved = self.resource.replace(join(&self.prefix, first.as_deref()));
            for arg in node.args.iter().skip(1) {
                self.visit_expr(arg);
            }
            self.resource = saved;
            return;
        }
        if is_route_value_root(node) {
            if let Some(entries) = self.cx.route_value(&Expr::Call(node.clone()), 0) {
                for entry in entries {
                    self.cx.push(None, entry);
                }
            }
            return;
        }
        syn::visit::visit_expr_call(self, node);
    }

    fn visit_expr_tuple(&mut self, node: &'ast syn::ExprTuple) {
        let elems: Vec<&Expr> = node.elems.iter().collect();
        if let ([method, route], Some(path)) = (elems.as_slice(), &self.resource)
            && let Some(method) = method_of(method)
        {
            let path = path.clone();
            // `web::to(f)` alone serves any method: the pair's method is the one it gets.
            if let Expr::Call(call) = strip(route)
                && call_name(call).as_deref() == Some("to")
                && let Some(handler) = call.args.first()
            {
                let entry = Entry {
                    method,
                    handler: self.cx.handler(handler),
                    line: line_of(*route),
                    layer: None,
                };
                self.cx.push(path, entry);
                return;
            }
            match self.cx.route_value(route, 0) {
                Some(entries) => {
                    for entry in entries {
                        self.cx.push(path.clone(), entry);
                    }
                }
                None => {
                    let why = format!("a route the reader cannot follow: `{}`", short(route));
                    let entry = Entry {
                        method,
                        handler: Handler::Unreadable(why),
                        line: line_of(*route),
                        layer: None,
                    };
                    self.cx.push(path, entry);
                }
            }
            return;
        }
        syn::visit::visit_expr_tuple(self, node);
    }

    // A route value bound by `let` is read where the binding is registered.
    fn visit_local(&mut self, node: &'ast syn::Local) {
        if let Some(init) = &node.init
            && let (Expr::Call(call), _) = unroll(&init.expr)
            && is_route_value_root(call)
        {
            return;
        }
        syn::visit::visit_local(self, node);
    }

    // Nested items are functions of their own, read on their own.
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}
