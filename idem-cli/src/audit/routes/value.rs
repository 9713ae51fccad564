//! What a route's value serves: an axum method router (`post(f)`, `on(..)`, their
//! chains and merges) or an actix `Route` (`web::post().to(f)`, `web::method(..)`).

use syn::{Expr, ExprCall};

use super::syntax::{axum_method, filter_methods, method_of, strip, tail_expr, unroll};
use super::{Cx, Entry, Handler, MAX_DEPTH};
use crate::audit::index::{Want, line_of};

impl Cx<'_> {
    /// What a route's value serves (an axum method router, an actix `Route`, or a call
    /// that builds one); `None` when it cannot be read.
    pub(super) fn route_value(&mut self, expr: &Expr, depth: usize) -> Option<Vec<Entry>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let expr = strip(expr);
        let (root, calls) = unroll(expr);
        let mut entries = match root {
            Expr::Call(call) => self.route_root(call, depth)?,
            Expr::Block(block) => {
                let tail = block.block.stmts.last()?;
                let syn::Stmt::Expr(tail, None) = tail else {
                    return None;
                };
                self.route_value(tail, depth + 1)?
            }
            _ => return None,
        };
        for call in calls {
            let method = call.method.to_string();
            let args: Vec<&Expr> = call.args.iter().collect();
            match method.as_str() {
                // An actix `Route`: `.method(Method::POST)`, `.guard(guard::Post())`,
                // `.to(f)`.
                "method" | "guard" => {
                    if let Some(m) = args.first().and_then(|a| method_of(a)) {
                        entries.push(Entry {
                            method: m,
                            handler: Handler::Unreadable("no `.to(handler)` seen".into()),
                            line: line_of(&call.method),
                            layer: None,
                        });
                    }
                }
                "to" => {
                    let handler = args.first().map(|a| self.handler(a));
                    if let Some(handler) = handler {
                        for entry in &mut entries {
                            entry.handler = handler.clone();
                        }
                    }
                }
                "merge" => {
                    let more = args.first().and_then(|a| self.route_value(a, depth + 1));
                    match more {
                        Some(more) => entries.extend(more),
                        None => entries.push(Entry {
                            method: "?".into(),
                            handler: Handler::Unreadable(
                                "a method router merged in cannot be read".into(),
                            ),
                            line: line_of(&call.method),
                            layer: None,
                        }),
                    }
                }
                "on" if args.len() == 2 => {
                    let handler = self.handler(args[1]);
                    for m in filter_methods(args[0]) {
                        entries.push(Entry {
                            method: m,
                            handler: handler.clone(),
                            line: line_of(&call.method),
                            layer: None,
                        });
                    }
                }
                "layer" | "route_layer" => {
                    if let Some(layer) = args.first().and_then(|a| self.layer(a)) {
                        for entry in &mut entries {
                            entry.layer.get_or_insert_with(|| layer.clone());
                        }
                    }
                }
                name if args.len() == 1 && axum_method(name).is_some() => {
                    let handler = self.handler(args[0]);
                    entries.push(Entry {
                        method: axum_method(name).unwrap_or_default(),
                        handler,
                        line: line_of(&call.method),
                        layer: None,
                    });
                }
                _ => {}
            }
        }
        // `.to(f)` after `.method(..)` set the handler above; an entry still without one
        // serves every method (`web::to(f)`): not listed, as a route for any method.
        entries.retain(|entry| entry.method != "ANY");
        Some(entries)
    }

    pub(super) fn route_root(&mut self, call: &ExprCall, depth: usize) -> Option<Vec<Entry>> {
        let Expr::Path(func) = &*call.func else {
            return None;
        };
        let name = func.path.segments.last()?.ident.to_string();
        let args: Vec<&Expr> = call.args.iter().collect();
        let line = line_of(&func.path);
        // axum: `post(f)`, `on(MethodFilter::POST, f)`, `any(f)`.
        if args.len() == 1
            && let Some(method) = axum_method(&name)
        {
            return Some(vec![Entry {
                method,
                handler: self.handler(args[0]),
                line,
                layer: None,
            }]);
        }
        if name == "on" && args.len() == 2 {
            let handler = self.handler(args[1]);
            return Some(
                filter_methods(args[0])
                    .into_iter()
                    .map(|method| Entry {
                        method,
                        handler: handler.clone(),
                        line,
                        layer: None,
                    })
                    .collect(),
            );
        }
        // actix: `web::post()`, `web::method(Method::POST)`, `web::route()`, `web::to(f)`.
        if args.is_empty()
            && let Some(method) = axum_method(&name)
        {
            return Some(vec![Entry {
                method,
                handler: Handler::Unreadable("no `.to(handler)` seen".into()),
                line,
                layer: None,
            }]);
        }
        if name == "method" && args.len() == 1 {
            let method = method_of(args[0])?;
            return Some(vec![Entry {
                method,
                handler: Handler::Unreadable("no `.to(handler)` seen".into()),
                line,
                layer: None,
            }]);
        }
        if name == "route" && args.is_empty() {
            return Some(Vec::new());
        }
        if name == "to" && args.len() == 1 {
            return Some(vec![Entry {
                method: "ANY".into(),
                handler: self.handler(args[0]),
                line,
                layer: None,
            }]);
        }
        // A helper of the application's: the routers among its arguments, or else what
        // the function it names returns.
        let mut found: Option<Vec<Entry>> = None;
        for arg in &args {
            if matches!(strip(arg), Expr::Call(_) | Expr::MethodCall(_))
                && let Some(entries) = self.route_value(arg, depth + 1)
            {
                found.get_or_insert_with(Vec::new).extend(entries);
            }
        }
        if found.is_some() {
            return found;
        }
        let id = self.index.resolve(&func.path, self.file, Want::Builder)?;
        let tail = tail_expr(&self.index.fns[id].block)?;
        if self.stack.contains(&id) {
            return None;
        }
        self.nested.insert(id);
        self.stack.push(id);
        let saved = self.file;
        self.file = self.index.fns[id].file;
        let value = self.route_value(tail, depth + 1);
        self.file = saved;
        self.stack.pop();
        value
    }
}
