//! The application's sources as the audit reads them: every function with a body (free,
//! in an `impl` or a trait, or in a `macro_rules!` body), every string constant and every
//! `Policy` static, found by name. Nothing is type-checked: a name is resolved by its last
//! segment, then by the module path and the file nearest to where it is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::{Attribute, Block, Expr, Item, Lit, Signature};

/// The prefix a `macro_rules!` metavariable (`$module`) is read as, so that the body
/// parses as items; [`display_path`] turns it back into `$module`.
const METAVAR: &str = "__idem_audit_metavar_";

/// One source file, parsed.
#[derive(Debug)]
pub(crate) struct Source {
    /// The path shown in the output: relative to the audited folder.
    pub(crate) shown: String,
    /// The components of the file's path, for "nearest file" comparisons.
    components: Vec<String>,
}

/// A function with a body.
pub(crate) struct FnDef {
    pub(crate) name: String,
    /// Inline modules and file names it sits in, outermost first.
    module: Vec<String>,
    pub(crate) file: usize,
    pub(crate) line: usize,
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) sig: Signature,
    pub(crate) block: Block,
}

// syn's syntax trees implement `Debug` only with its `extra-traits` feature; the name and
// place say which function it is.
impl std::fmt::Debug for FnDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnDef")
            .field("name", &self.name)
            .field("module", &self.module)
            .field("file", &self.file)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// A `static` built by `Policy::new(handler, module, scope, retention_secs)`.
#[derive(Debug, Clone)]
pub(crate) struct PolicyDef {
    pub(crate) scope: Option<String>,
    pub(crate) retention_secs: Option<u64>,
}

/// Everything the audit knows of one audited folder.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) sources: Vec<Source>,
    pub(crate) fns: Vec<FnDef>,
    consts: HashMap<String, Vec<String>>,
    policies: HashMap<String, PolicyDef>,
    /// Names an `IdempotencyLayer` is also known by (`use .. as L`, `type L = ..`).
    layer_names: Vec<String>,
    by_name: HashMap<String, Vec<usize>>,
}

/// What a name is looked up for: a handler is usually `async`, a function that builds
/// routes usually is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Handler,
    Builder,
}

impl Index {
    /// Reads `files` (shown as named); a file that does not parse is reported on
    /// `warnings` and skipped, so one broken file does not hide the others' routes.
    pub(crate) fn read(files: &[PathBuf], warnings: &mut Vec<String>) -> Self {
        let mut index = Self::default();
        for file in files {
            let text = match std::fs::read_to_string(file) {
                Ok(text) => text,
                Err(error) => {
                    warnings.push(format!("cannot read {}: {error}", file.display()));
                    continue;
                }
            };
            let ast = match syn::parse_file(&text) {
                Ok(ast) => ast,
                Err(error) => {
                    warnings.push(format!(
                        "cannot parse {}:{}: {error}",
                        file.display(),
                        error.span().start().line
                    ));
                    continue;
                }
            };
            let shown = shown_path(file);
            let components: Vec<String> = shown.split('/').map(str::to_owned).collect();
            let module = file_module(&components);
            index.sources.push(Source { shown, components });
            let id = index.sources.len() - 1;
            index.items(&ast.items, id, &module);
        }
        for (i, def) in index.fns.iter().enumerate() {
            index.by_name.entry(def.name.clone()).or_default().push(i);
        }
        index
    }

    fn items(&mut self, items: &[Item], file: usize, module: &[String]) {
        for item in items {
            match item {
                Item::Fn(f) => self.add_fn(&f.attrs, &f.sig, &f.block, file, module),
                Item::Impl(imp) => {
                    for item in &imp.items {
                        if let syn::ImplItem::Fn(f) = item {
                            self.add_fn(&f.attrs, &f.sig, &f.block, file, module);
                        }
                    }
                }
                Item::Trait(tr) => {
                    for item in &tr.items {
                        if let syn::TraitItem::Fn(f) = item
                            && let Some(block) = &f.default
                        {
                            self.add_fn(&f.attrs, &f.sig, block, file, module);
                        }
                    }
                }
                Item::Mod(m) => {
                    if let Some((_, items)) = &m.content {
                        let mut inner = module.to_vec();
                        inner.push(m.ident.to_string());
                        self.items(items, file, &inner);
                    }
                }
                Item::Const(c) => {
                    if let Some(value) = string_lit(&c.expr) {
                        self.consts
                            .entry(c.ident.to_string())
                            .or_default()
                            .push(value);
                    }
                }
                Item::Static(s) => {
                    if let Some(policy) = policy_def(&s.expr) {
                        self.policies.insert(s.ident.to_string(), policy);
                    }
                }
                Item::Use(u) => self.layer_alias_in_use(&u.tree),
                Item::Type(t) if mentions(&quote::quote!(#t), "IdempotencyLayer") => {
                    self.layer_names.push(t.ident.to_string());
                }
                Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {
                    for body in macro_rule_bodies(m.mac.tokens.clone()) {
                        // A body that is not items (an expression macro, or one with
                        // repetitions) has no handlers to find.
                        if let Ok(file_ast) = syn::parse2::<syn::File>(body) {
                            self.items(&file_ast.items, file, module);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn add_fn(
        &mut self,
        attrs: &[Attribute],
        sig: &Signature,
        block: &Block,
        file: usize,
        module: &[String],
    ) {
        self.fns.push(FnDef {
            name: sig.ident.to_string(),
            module: module.to_vec(),
            file,
            line: sig.ident.span().start().line,
            attrs: attrs.to_vec(),
            sig: sig.clone(),
            block: block.clone(),
        });
    }

    fn layer_alias_in_use(&mut self, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => self.layer_alias_in_use(&p.tree),
            syn::UseTree::Rename(r) if r.ident == "IdempotencyLayer" => {
                self.layer_names.push(r.rename.to_string());
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.layer_alias_in_use(tree);
                }
            }
            _ => {}
        }
    }

    /// The function a path names, from the file `from`; `None` when no function with a
    /// body has its name.
    pub(crate) fn resolve(&self, path: &syn::Path, from: usize, want: Want) -> Option<usize> {
        let segments = segments(path);
        let (name, qualifiers) = segments.split_last()?;
        // A lower-case qualifier is a module (`payments::router`): the function must be
        // in it, or the path is another crate's (`axum::serve`, `web::post`). Upper-case
        // ones are types, traits or type parameters (`DB::create_order`), which a reader
        // without types cannot follow, so they do not narrow the search.
        let module = qualifiers
            .iter()
            .rev()
            .find(|q| {
                q.starts_with(|c: char| c.is_lowercase() || c == '_')
                    && !matches!(q.as_str(), "crate" | "self" | "super")
            })
            .cloned();
        let candidates: Vec<usize> = self
            .by_name
            .get(name)?
            .iter()
            .copied()
            .filter(|&i| {
                module
                    .as_ref()
                    .is_none_or(|m| self.fns[i].module.contains(m))
            })
            .collect();
        let wanted: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| (self.fns[i].sig.asyncness.is_some()) == (want == Want::Handler))
            .collect();
        // A router is built by a plain function; a handler is usually `async`, but may be
        // a plain one returning a future.
        let pool = match want {
            Want::Builder => wanted,
            Want::Handler if wanted.is_empty() => candidates,
            Want::Handler => wanted,
        };
        pool.into_iter().max_by_key(|&i| {
            let def = &self.fns[i];
            let module_match = qualifiers
                .iter()
                .rev()
                .zip(def.module.iter().rev())
                .take_while(|(a, b)| a == b)
                .count();
            let near = self.sources[from]
                .components
                .iter()
                .zip(&self.sources[def.file].components)
                .take_while(|(a, b)| a == b)
                .count();
            // Earlier definitions win ties (max_by_key keeps the last maximum).
            (module_match, near, usize::MAX - i)
        })
    }

    /// A string constant's value by name, when only one value goes by that name.
    pub(crate) fn const_str(&self, name: &str) -> Option<&str> {
        match self.consts.get(name).map(Vec::as_slice) {
            Some([one]) => Some(one),
            Some(values) if values.iter().all(|v| *v == values[0]) && !values.is_empty() => {
                Some(&values[0])
            }
            _ => None,
        }
    }

    /// Whether `tokens` build an `IdempotencyLayer` (by its name or an alias of it).
    pub(crate) fn is_idem_layer(&self, tokens: &TokenStream) -> bool {
        mentions(tokens, "IdempotencyLayer")
            || self.layer_names.iter().any(|name| mentions(tokens, name))
    }

    /// The `Policy` statics `tokens` name.
    pub(crate) fn policies_in(&self, tokens: &TokenStream) -> Option<(String, PolicyDef)> {
        let mut found = None;
        each_ident(tokens, &mut |ident| {
            let name = ident.to_string();
            if found.is_none()
                && let Some(policy) = self.policies.get(&name)
            {
                found = Some((name, policy.clone()));
            }
        });
        found
    }
}

/// `file` with `/` separators.
fn shown_path(file: &Path) -> String {
    file.to_string_lossy()
        .replace(std::path::MAIN_SEPARATOR, "/")
}

/// The module path a file's place suggests (`src/shop/orders.rs` is `shop::orders`);
/// only used to prefer one same-named function over another.
fn file_module(components: &[String]) -> Vec<String> {
    let mut module: Vec<String> = components
        .iter()
        .filter(|c| !matches!(c.as_str(), "src" | "examples"))
        .map(|c| c.trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(
        module.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        module.pop();
    }
    module
}

/// The bodies of a `macro_rules!`'s rules, with each `$name` made an identifier.
fn macro_rule_bodies(tokens: TokenStream) -> Vec<TokenStream> {
    let mut bodies = Vec::new();
    let mut trees = tokens.into_iter().peekable();
    // Rules are `(matcher) => {body}` separated by `;`.
    while let Some(tree) = trees.next() {
        if let TokenTree::Punct(p) = &tree
            && p.as_char() == '='
            && let Some(TokenTree::Punct(gt)) = trees.peek()
            && gt.as_char() == '>'
        {
            trees.next();
            if let Some(TokenTree::Group(body)) = trees.next() {
                bodies.push(metavars_as_idents(body.stream()));
            }
        }
    }
    bodies
}

fn metavars_as_idents(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut trees = tokens.into_iter().peekable();
    while let Some(tree) = trees.next() {
        match tree {
            TokenTree::Punct(p) if p.as_char() == '$' => {
                if let Some(TokenTree::Ident(name)) = trees.peek() {
                    let ident = Ident::new(&format!("{METAVAR}{name}"), name.span());
                    trees.next();
                    out.push(TokenTree::Ident(ident));
                } else {
                    out.push(TokenTree::Punct(p));
                }
            }
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), metavars_as_idents(g.stream()));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

/// The names of a path's segments, without generic arguments (`web::post`: `web`, `post`).
pub(crate) fn segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// Every token, groups opened (their delimiters dropped), except that a group also stays
/// in place before its contents so `.run(..)` can be matched with its arguments.
pub(crate) fn flatten(tokens: &TokenStream) -> Vec<TokenTree> {
    let mut out = Vec::new();
    for tree in tokens.clone() {
        if let TokenTree::Group(g) = &tree {
            out.push(tree.clone());
            out.extend(flatten(&g.stream()));
        } else {
            out.push(tree);
        }
    }
    out
}

/// A path as written, without generic arguments, and with a `macro_rules!` metavariable
/// shown as written (`$module::create_order`).
pub(crate) fn display_path(path: &syn::Path) -> String {
    let text = segments(path).join("::");
    let text = text.replace(METAVAR, "$");
    if path.leading_colon.is_some() {
        format!("::{text}")
    } else {
        text
    }
}

/// A string literal's value.
pub(crate) fn string_lit(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(s) => Some(s.value()),
            _ => None,
        },
        Expr::Reference(r) => string_lit(&r.expr),
        Expr::Group(g) => string_lit(&g.expr),
        Expr::Paren(p) => string_lit(&p.expr),
        _ => None,
    }
}

fn policy_def(expr: &Expr) -> Option<PolicyDef> {
    // `Policy::new(..)`, possibly followed by builder calls such as `.with_lease(..)`.
    let mut expr = expr;
    while let Expr::MethodCall(call) = expr {
        expr = &call.receiver;
    }
    let Expr::Call(call) = expr else { return None };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let segments = segments(&func.path);
    if !segments.ends_with(&["Policy".to_owned(), "new".to_owned()]) {
        return None;
    }
    let args: Vec<&Expr> = call.args.iter().collect();
    let retention_secs = args.get(3).and_then(|arg| match arg {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Int(int) => int.base10_parse().ok(),
            _ => None,
        },
        _ => None,
    });
    Some(PolicyDef {
        scope: args.get(2).and_then(|arg| string_lit(arg)),
        retention_secs,
    })
}

/// Calls `f` on every identifier in `tokens`, nested groups included.
pub(crate) fn each_ident(tokens: &TokenStream, f: &mut dyn FnMut(&Ident)) {
    for tree in tokens.clone() {
        match tree {
            TokenTree::Ident(ident) => f(&ident),
            TokenTree::Group(g) => each_ident(&g.stream(), f),
            _ => {}
        }
    }
}

/// Whether `tokens` hold the identifier `name`.
pub(crate) fn mentions(tokens: &TokenStream, name: &str) -> bool {
    let mut found = false;
    each_ident(tokens, &mut |ident| found |= ident == name);
    found
}

/// Every string literal in `tokens` (inside macros too, such as `sqlx::query!`).
pub(crate) fn string_literals(tokens: &TokenStream, out: &mut Vec<String>) {
    for tree in tokens.clone() {
        match tree {
            TokenTree::Literal(lit) => {
                if let Ok(Lit::Str(s)) = syn::parse2::<Lit>(TokenTree::Literal(lit).into()) {
                    out.push(s.value());
                }
            }
            TokenTree::Group(g) => {
                string_literals(&g.stream(), out);
            }
            _ => {}
        }
    }
}

/// The line a piece of syntax starts on.
pub(crate) fn line_of(node: &impl Spanned) -> usize {
    let span: Span = node.span();
    span.start().line
}
