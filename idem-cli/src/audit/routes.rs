//! Finds the routes an application registers, from its syntax: actix-web's route
//! attributes, `web::resource`, `web::scope`, `.route(..)`, `.service(..)` and
//! `.configure(..)`; axum's method routers (`post(f)`, `on(MethodFilter::POST, f)`, their
//! chains), `Router::route`, `nest`, `merge` and `IdempotencyLayer` layers.
//!
//! Every function body is read as a possible place where routes are registered. A
//! function that another one nests, merges or configures is read again from there, with
//! the prefix and layers it gets; its rows from its own reading are then dropped, so each
//! route is listed once, in the context it is served in.

use std::collections::HashSet;

use quote::ToTokens;
use syn::visit::Visit;
use syn::{Expr, ExprCall, ExprMethodCall, ExprPath};

use super::index::{FnDef, Index, Want, display_path, line_of, segments, string_lit};

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

fn is_ident(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Path(p) if p.path.is_ident(name))
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

    /// What a route's value serves (an axum method router, an actix `Route`, or a call
    /// that builds one); `None` when it cannot be read.
    fn route_value(&mut self, expr: &Expr, depth: usize) -> Option<Vec<Entry>> {
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

    fn route_root(&mut self, call: &ExprCall, depth: usize) -> Option<Vec<Entry>> {
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

    /// A chain on a router, an actix `App`, `ServiceConfig`, `Scope` or `Resource`.
    fn chain(&mut self, node: &ExprMethodCall, prefix: &Prefix) {
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
    fn router_call(&mut self, call: &ExprCall, prefix: &Prefix) {
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
    fn router_value(&mut self, inner: &Expr, prefix: &Prefix) {
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

    fn route(&mut self, path: Prefix, value: &Expr) {
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

    fn service(&mut self, service: &Expr, prefix: &Prefix) {
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
fn builds_routes(def: &FnDef) -> bool {
    let tokens = def.block.to_token_stream();
    ["route", "nest", "service", "merge", "configure"]
        .iter()
        .any(|name| super::index::mentions(&tokens, name))
}

/// A generic walk of expressions: each method-call chain met is read as a possible
/// router; a call with a path first and `(Method::POST, web::to(f))` pairs among its
/// arguments (an application's own `resource(path, routes)` helper) as a resource.
struct Walker<'c, 'a> {
    cx: &'c mut Cx<'a>,
    prefix: Prefix,
    /// The path of the helper call being walked, for its `(Method, route)` pairs.
    resource: Option<Prefix>,
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

fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Group(g) => strip(&g.expr),
        Expr::Reference(r) => strip(&r.expr),
        other => other,
    }
}

/// A method-call chain as its root and its calls, first call first.
fn unroll(expr: &Expr) -> (&Expr, Vec<&ExprMethodCall>) {
    let mut calls = Vec::new();
    let mut current = strip(expr);
    while let Expr::MethodCall(call) = current {
        calls.push(call);
        current = strip(&call.receiver);
    }
    calls.reverse();
    (current, calls)
}

fn call_name(call: &ExprCall) -> Option<String> {
    match &*call.func {
        Expr::Path(ExprPath { path, .. }) => Some(path.segments.last()?.ident.to_string()),
        _ => None,
    }
}

/// `post(f)`, `web::post()`, `on(..)`, `web::method(..)`, `web::to(f)`: the start of a
/// method router or an actix `Route`.
fn is_route_value_root(call: &ExprCall) -> bool {
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
fn is_routing_path(call: &ExprCall) -> bool {
    let Expr::Path(func) = &*call.func else {
        return false;
    };
    let segments = segments(&func.path);
    segments.len() == 1 || matches!(segments[segments.len() - 2].as_str(), "routing" | "web")
}

/// The upper-case method a router function is named after (`post` is `POST`).
fn axum_method(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    (UNSAFE.contains(&upper.as_str()) || SAFE.contains(&upper.as_str())).then_some(upper)
}

/// `Method::POST`, `http::Method::PUT`, `guard::Post()`, `guard::Method(Method::POST)`.
fn method_of(expr: &Expr) -> Option<String> {
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
fn filter_methods(expr: &Expr) -> Vec<String> {
    let mut methods = Vec::new();
    super::index::each_ident(&expr.to_token_stream(), &mut |ident| {
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
fn local_init<'b>(block: &'b syn::Block, name: &syn::Ident) -> Option<&'b Expr> {
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

fn tail_expr(block: &syn::Block) -> Option<&Expr> {
    match block.stmts.last()? {
        syn::Stmt::Expr(expr, None) => Some(expr),
        _ => None,
    }
}

/// An expression shortened for a message.
fn short(expr: &Expr) -> String {
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
    fn prefixes_join_with_one_slash_and_unknown_parts_stay_unknown() {
        let root = Some(String::new());
        assert_eq!(join(&root, Some("/orders")).as_deref(), Some("/orders"));
        let api = Some("/api/".to_owned());
        assert_eq!(join(&api, Some("/orders")).as_deref(), Some("/api/orders"));
        assert_eq!(join(&api, Some("")).as_deref(), Some("/api/"));
        assert_eq!(join(&None, Some("/orders")), None);
        assert_eq!(join(&api, None), None);
    }

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
