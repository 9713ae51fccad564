//! Finds the routes an application registers, from its syntax: actix-web's route
//! attributes, `web::resource`, `web::scope`, `.route(..)`, `.service(..)` and
//! `.configure(..)`; axum's method routers (`post(f)`, `on(MethodFilter::POST, f)`, their
//! chains), `Router::route`, `nest`, `merge` and `IdempotencyLayer` layers.
//!
//! Every function body is read as a possible place where routes are registered. A
//! function that another one nests, merges or configures is read again from there, with
//! the prefix and layers it gets; its rows from its own reading are then dropped, so each
//! route is listed once, in the context it is served in.
//!
//! This module keeps what is found and the reading's context ([`Cx`]); `walker` walks a
//! body, `chain` reads the registrations it meets, `value` what each route serves, and
//! `syntax` the shapes both recognise.

mod chain;
mod syntax;
mod value;
mod walker;

use std::collections::HashSet;

use quote::ToTokens;
use syn::Expr;
use syn::visit::Visit;

use super::index::{FnDef, Index, Want, display_path, line_of, string_lit};
use syntax::{is_ident, short, strip};
use walker::Walker;

/// The methods an audit lists.
pub(crate) const UNSAFE: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];
const SAFE: [&str; 6] = ["GET", "HEAD", "OPTIONS", "TRACE", "CONNECT", "QUERY"];

/// Which handler serves a route.
#[derive(Debug, Clone)]
pub(crate) enum Handler {
    /// A path naming a function; `def` is its definition when the sources hold it.
    Fn { written: String, def: Option<usize> },
    /// Something the reader cannot follow, and why.
    Unreadable(String),
}

/// An `IdempotencyLayer` over a route.
#[derive(Debug, Clone)]
pub(crate) struct Layered {
    pub(crate) policy: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) retention_secs: Option<u64>,
}

/// One route as registered.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// Upper case; `?` when the reader could not tell.
    pub(crate) method: String,
    /// `None` when some part of it is not known statically.
    pub(crate) path: Option<String>,
    pub(crate) handler: Handler,
    /// Where it is registered (file index, line).
    pub(crate) file: usize,
    pub(crate) line: usize,
    pub(crate) layer: Option<Layered>,
    /// The function whose reading found it, first.
    origin: usize,
    /// A route value that is a variable of the function registering it, such as an
    /// application's `resource(path, routes)` helper: listed only if no call of the
    /// helper was read (each call's routes are listed where it is called).
    via_param: Option<usize>,
}

/// A route prefix: `None` when not known statically.
type Prefix = Option<String>;

fn join(prefix: &Prefix, path: Option<&str>) -> Prefix {
    let (prefix, path) = (prefix.as_deref()?, path?);
    if prefix.is_empty() {
        return Some(path.to_owned());
    }
    if path.is_empty() {
        return Some(prefix.to_owned());
    }
    Some(format!(
        "{}/{}",
        prefix.trim_end_matches('/'),
        path.trim_start_matches('/')
    ))
}

/// Every route registered in `index`'s sources, unsafe or not, and the attribute handlers.
pub(crate) fn find(index: &Index) -> Vec<Found> {
    let mut cx = Cx {
        index,
        file: 0,
        origin: 0,
        stack: Vec::new(),
        out: Vec::new(),
        services: Vec::new(),
        nested: HashSet::new(),
        helpers: HashSet::new(),
    };
    for id in 0..index.fns.len() {
        cx.origin = id;
        cx.walk_fn(id, &Some(String::new()));
    }
    let nested = std::mem::take(&mut cx.nested);
    let helpers = std::mem::take(&mut cx.helpers);
    let mut found: Vec<Found> = cx
        .out
        .into_iter()
        .filter(|row| !nested.contains(&row.origin))
        .filter(|row| {
            row.via_param
                .is_none_or(|helper| !helpers.contains(&helper))
        })
        .collect();
    let services: Vec<(usize, Prefix)> = cx
        .services
        .into_iter()
        .filter(|(origin, _, _)| !nested.contains(origin))
        .map(|(_, def, prefix)| (def, prefix))
        .collect();
    for (id, def) in index.fns.iter().enumerate() {
        let Some((methods, path, line)) = route_attribute(def) else {
            continue;
        };
        let mut prefixes: Vec<Prefix> = services
            .iter()
            .filter(|(service, _)| *service == id)
            .map(|(_, prefix)| prefix.clone())
            .collect();
        if prefixes.is_empty() {
            prefixes.push(Some(String::new()));
        }
        prefixes.dedup();
        for prefix in prefixes {
            for method in &methods {
                found.push(Found {
                    method: method.clone(),
                    path: join(&prefix, path.as_deref()),
                    handler: Handler::Fn {
                        written: def.name.clone(),
                        def: Some(id),
                    },
                    file: def.file,
                    line,
                    layer: None,
                    origin: id,
                    via_param: None,
                });
            }
        }
    }
    found
}

/// actix-web's `#[post("/p")]` (and the other methods) or `#[route("/p", method = "POST",
/// ..)]` on a handler: its methods, its path and the attribute's line.
fn route_attribute(def: &FnDef) -> Option<(Vec<String>, Option<String>, usize)> {
    for attr in &def.attrs {
        let Some(last) = attr.path().segments.last() else {
            continue;
        };
        let name = last.ident.to_string();
        let upper = name.to_ascii_uppercase();
        let single = UNSAFE.contains(&upper.as_str()) || SAFE.contains(&upper.as_str());
        if !single && name != "route" {
            continue;
        }
        let Ok(list) = attr.meta.require_list() else {
            continue;
        };
        let args: Vec<Expr> = list
            .parse_args_with(syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated)
            .map(|args| args.into_iter().collect())
            .unwrap_or_default();
        let path = args.first().and_then(string_lit);
        let methods = if single {
            vec![upper]
        } else {
            args.iter()
                .filter_map(|arg| match arg {
                    Expr::Assign(assign) if is_ident(&assign.left, "method") => {
                        string_lit(&assign.right).map(|m| m.to_ascii_uppercase())
                    }
                    _ => None,
                })
                .collect()
        };
        return Some((methods, path, line_of(attr)));
    }
    None
}

/// A method router's or an actix `Route`'s entries.
#[derive(Debug, Clone)]
struct Entry {
    method: String,
    handler: Handler,
    line: usize,
    layer: Option<Layered>,
}

struct Cx<'a> {
    index: &'a Index,
    /// The file of the function being read.
    file: usize,
    /// The function whose reading this is (see [`Found::origin`]).
    origin: usize,
    stack: Vec<usize>,
    out: Vec<Found>,
    /// Handlers registered with `.service(f)`: (origin, handler, prefix).
    services: Vec<(usize, usize, Prefix)>,
    /// Functions read again from the place that nests, merges or configures them.
    nested: HashSet<usize>,
    /// Functions called with a path first, whose calls' routes were read (see
    /// [`Found::via_param`]).
    helpers: HashSet<usize>,
}

/// How deep nested readings (a router built by a function that calls another) go.
const MAX_DEPTH: usize = 16;

impl Cx<'_> {
    fn walk_fn(&mut self, id: usize, prefix: &Prefix) {
        if self.stack.contains(&id) || self.stack.len() >= MAX_DEPTH {
            return;
        }
        let saved = self.file;
        self.file = self.index.fns[id].file;
        self.stack.push(id);
        let block = &self.index.fns[id].block;
        let mut walker = Walker {
            cx: self,
            prefix: prefix.clone(),
            resource: None,
        };
        walker.visit_block(block);
        self.stack.pop();
        self.file = saved;
    }

    /// Reads a nested function (from `nest`, `merge`, `configure`, a router-returning call)
    /// with `prefix`.
    fn walk_nested(&mut self, id: usize, prefix: &Prefix) {
        if self.stack.contains(&id) {
            return;
        }
        self.nested.insert(id);
        self.walk_fn(id, prefix);
    }

    fn walk_expr(&mut self, expr: &Expr, prefix: &Prefix) {
        let mut walker = Walker {
            cx: self,
            prefix: prefix.clone(),
            resource: None,
        };
        walker.visit_expr(expr);
    }

    fn push(&mut self, path: Prefix, entry: Entry) {
        let (file, line) = match &entry.handler {
            Handler::Fn { def: Some(def), .. } => {
                let def = &self.index.fns[*def];
                (def.file, def.line)
            }
            _ => (self.file, entry.line),
        };
        self.out.push(Found {
            method: entry.method,
            path,
            handler: entry.handler,
            file,
            line,
            layer: entry.layer,
            origin: self.origin,
            via_param: None,
        });
    }

    fn unresolved(&mut self, path: Prefix, line: usize, why: &str) {
        self.push(
            path,
            Entry {
                method: "?".into(),
                handler: Handler::Unreadable(why.into()),
                line,
                layer: None,
            },
        );
    }

    /// A path segment as written: a literal, or a string constant.
    fn path_arg(&self, expr: &Expr) -> Option<String> {
        if let Some(text) = string_lit(expr) {
            return Some(text);
        }
        match expr {
            Expr::Path(p) => self
                .index
                .const_str(&p.path.segments.last()?.ident.to_string())
                .map(str::to_owned),
            Expr::Reference(r) => self.path_arg(&r.expr),
            _ => None,
        }
    }

    fn handler(&self, expr: &Expr) -> Handler {
        match strip(expr) {
            Expr::Path(p) => Handler::Fn {
                written: display_path(&p.path),
                def: self.index.resolve(&p.path, self.file, Want::Handler),
            },
            Expr::Closure(_) => Handler::Unreadable("the handler is a closure".into()),
            other => Handler::Unreadable(format!(
                "the handler is an expression the reader cannot follow: `{}`",
                short(other)
            )),
        }
    }

    fn layer(&self, arg: &Expr) -> Option<Layered> {
        let tokens = arg.to_token_stream();
        if !self.index.is_idem_layer(&tokens) {
            return None;
        }
        let policy = self.index.policies_in(&tokens);
        Some(Layered {
            scope: policy.as_ref().and_then(|(_, p)| p.scope.clone()),
            retention_secs: policy.as_ref().and_then(|(_, p)| p.retention_secs),
            policy: policy.map(|(name, _)| name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_join_with_one_slash_and_unknown_parts_stay_unknown() {
        let root = Some(String::new());
        assert_eq!(join(&root, Some("/orders")).as_deref(), Some("/orders"));
        let api = Some("/api/".to_owned());
        assert_eq!(join(&api, Some("/orders")).as_deref(), Some("/api/orders"));
        assert_eq!(join(&api, Some("")).as_deref(), Some("/api/"));
        assert_eq!(join(&None, Some("/orders")), None);
        assert_eq!(join(&api, None), None);
    }
}
