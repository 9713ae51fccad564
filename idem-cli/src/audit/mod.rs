//! `idem audit`: the application's POST, PUT, PATCH and DELETE routes and what protects
//! each, read from its Rust sources as a linter reads them (nothing is built).
//!
//! The JSON output (`--format json`) is a public contract:
//!
//! ```text
//! {"routes": [{
//!   "method": "POST",                 POST, PUT, PATCH, DELETE, or "?" (not known)
//!   "path": "/api/orders",            the full path pattern; null when not known statically
//!   "handler": "create_order",        the handler's path as written; null when unreadable
//!   "file": "src/main.rs",            the handler's definition, else the registration
//!   "line": 12,
//!   "protection": "idempotent",       idempotent | layer | exempt | none | unresolved
//!   "scope": "account",               idempotent, layer: the scope (else null)
//!   "retention": "24h",               idempotent, layer: as written, or the default
//!   "key": "header(\"Idempotency-Key\")",   idempotent, layer: the key's source
//!   "form": "single",                 idempotent, layer: single | phased
//!   "store": "database",              idempotent, layer: database | redis (store = redis)
//!   "reason": null,                   exempt: its reason; unresolved: why
//!   "suggestion": null                none: the mechanism the seed's table suggests
//! }]}
//! ```
//!
//! Routes are sorted by path (unknown last), method (POST, PUT, PATCH, DELETE, ?),
//! handler, file and line; every field is always present.

mod handler;
mod harness;
mod index;
mod routes;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use idem_runtime::report::{self, DownstreamKey, EndpointReport, Mechanism, Tests};
use serde::Serialize;

use handler::{Attr, DEFAULT_KEY};
use index::{FnDef, Index};
use routes::{Found, Handler, UNSAFE};

/// `idem audit`'s arguments.
#[derive(Debug, Args)]
#[command(after_long_help = JSON_SCHEMA)]
pub(crate) struct AuditArgs {
    /// Crate or workspace folders (their `src/` and `examples/`, and member crates'), or
    /// plain folders of `.rs` files
    #[arg(value_name = "PATH", default_value = ".")]
    paths: Vec<PathBuf>,
    /// What to print
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Exit with status 1 when a route's protection is `none` or `unresolved`, naming
    /// each on stderr (the CI gate)
    #[arg(long)]
    deny_unprotected: bool,
}

/// The output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One row per route, for people
    Table,
    /// `{"routes": [..]}`, the schema below
    Json,
    /// The per-endpoint idempotency report, in Markdown
    Report,
}

const JSON_SCHEMA: &str = "\
--format json prints {\"routes\": [..]}, each route an object with every field present:
  method      POST, PUT, PATCH, DELETE, or \"?\" when not known
  path        the full path pattern, scopes and nests included; null when not known
  handler     the handler's path as written; null when it cannot be read
  file, line  the handler's definition, else where the route is registered
  protection  idempotent | layer | exempt | none | unresolved
  scope, retention, key, form, store
              for idempotent and layer: the scope, the retention as written, the key's
              source (header(\"Idempotency-Key\") by default), single | phased, and
              where the keys live, database | redis; else null
  reason      exempt: its reason; unresolved: why the route could not be read
  suggestion  none: the mechanism the seed's table suggests (labelled a suggestion)
Routes are sorted by path (unknown last), method, handler, file and line.";

/// One route of the output; the JSON schema is this struct's, field for field.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Row {
    method: String,
    path: Option<String>,
    handler: Option<String>,
    file: String,
    line: usize,
    protection: &'static str,
    scope: Option<String>,
    retention: Option<String>,
    key: Option<String>,
    form: Option<&'static str>,
    store: Option<&'static str>,
    reason: Option<String>,
    suggestion: Option<String>,
    /// For the report only.
    #[serde(skip)]
    extra: Extra,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Extra {
    webhook: bool,
    /// The `Policy` static a layer is built with.
    policy: Option<String>,
    downstream: Vec<String>,
    tests: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Output<'a> {
    routes: &'a [Row],
}

/// Runs the audit: prints the routes and returns the lines for stderr and whether the
/// gate failed, or an error message.
pub(crate) fn run(args: &AuditArgs) -> Result<Audit, String> {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for path in &args.paths {
        if !path.exists() {
            return Err(format!("{}: no such file or folder", path.display()));
        }
        let (files, test_dirs) = discover(path);
        let index = Index::read(&files, &mut warnings);
        let tests: Vec<_> = test_dirs
            .iter()
            .flat_map(|dir| harness::scan(dir))
            .collect();
        rows.extend(rows_of(&index, &tests));
    }
    rows.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    rows.dedup();
    let stdout = match args.format {
        Format::Table => table(&rows),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&Output { routes: &rows })
                .map_err(|error| error.to_string())?;
            text.push('\n');
            text
        }
        Format::Report => report_of(&rows),
    };
    let mut stderr: Vec<String> = warnings
        .into_iter()
        .map(|w| format!("warning: {w}"))
        .collect();
    let unprotected: Vec<&Row> = rows
        .iter()
        .filter(|row| matches!(row.protection, "none" | "unresolved"))
        .collect();
    let denied = args.deny_unprotected && !unprotected.is_empty();
    if denied {
        for row in &unprotected {
            let detail = match (&row.reason, &row.suggestion) {
                (Some(reason), _) => format!("unresolved: {reason}"),
                (None, Some(suggestion)) => format!("none (suggestion: {suggestion})"),
                (None, None) => row.protection.to_owned(),
            };
            stderr.push(format!(
                "unprotected route {} {} ({}) at {}:{}: {detail}",
                row.method,
                row.path.as_deref().unwrap_or("?"),
                row.handler.as_deref().unwrap_or("handler not readable"),
                row.file,
                row.line,
            ));
        }
        stderr.push(format!(
            "{} of {} mutating routes are unprotected (--deny-unprotected)",
            unprotected.len(),
            rows.len()
        ));
    }
    Ok(Audit {
        stdout,
        stderr,
        denied,
    })
}

/// What `idem audit` prints and whether it fails.
#[derive(Debug)]
pub(crate) struct Audit {
    pub(crate) stdout: String,
    /// Lines for stderr, each shown after `idem: `.
    pub(crate) stderr: Vec<String>,
    pub(crate) denied: bool,
}

fn sort_key(row: &Row) -> impl Ord + '_ {
    let method = UNSAFE
        .iter()
        .position(|m| *m == row.method)
        .unwrap_or(UNSAFE.len());
    (
        row.path.is_none(),
        row.path.clone(),
        method,
        row.handler.clone(),
        row.file.clone(),
        row.line,
    )
}

fn rows_of(index: &Index, tests: &[harness::Tested]) -> Vec<Row> {
    routes::find(index)
        .into_iter()
        .filter(|found| UNSAFE.contains(&found.method.as_str()) || found.method == "?")
        .map(|found| row(index, tests, found))
        .collect()
}

fn row(index: &Index, tests: &[harness::Tested], found: Found) -> Row {
    let mut row = Row {
        method: found.method.clone(),
        path: found.path.clone(),
        handler: None,
        file: index.sources[found.file].shown.clone(),
        line: found.line,
        protection: "unresolved",
        scope: None,
        retention: None,
        key: None,
        form: None,
        store: None,
        reason: None,
        suggestion: None,
        extra: Extra::default(),
    };
    let def: Option<(usize, &FnDef)> = match &found.handler {
        Handler::Unreadable(why) => {
            row.reason = Some(why.clone());
            None
        }
        Handler::Fn { written, def } => {
            row.handler = Some(written.clone());
            if def.is_none() {
                row.reason = Some(format!("`{written}` is not defined in the audited sources"));
            }
            def.map(|id| (id, &index.fns[id]))
        }
    };
    let Some((id, def)) = def else {
        return row;
    };
    let mut phased = false;
    match handler::attribute(def) {
        Some(Attr::Idempotent(attr)) => {
            phased = attr.phased;
            row.protection = "idempotent";
            row.scope = attr.scope;
            row.retention = Some(attr.retention);
            row.key = Some(attr.key);
            row.form = Some(if attr.phased { "phased" } else { "single" });
            row.store = Some(if attr.redis { "redis" } else { "database" });
            row.extra.webhook = attr.webhook;
            if attr.phased {
                row.extra.downstream = handler::phase_names(index, id);
            }
        }
        Some(Attr::Exempt(reason)) => {
            row.protection = "exempt";
            row.reason = Some(reason);
        }
        None => match &found.layer {
            Some(layer) => {
                row.protection = "layer";
                row.scope = layer.scope.clone();
                row.retention = layer
                    .retention_secs
                    .map(|secs| report::duration(Duration::from_secs(secs)));
                row.key = Some(DEFAULT_KEY.to_owned());
                row.form = Some("single");
                row.store = Some("database");
                row.extra.policy = layer.policy.clone();
            }
            None => {
                row.protection = "none";
                row.suggestion = Some(handler::suggestion(
                    &found.method,
                    found.path.as_deref(),
                    Some(def),
                ));
            }
        },
    }
    if let Some(path) = &row.path {
        row.extra.tests = harness::checks_for(tests, &row.method, path, phased);
    }
    row
}

fn detail(row: &Row) -> String {
    match row.protection {
        "idempotent" | "layer" => {
            let mut parts = vec![
                format!("scope {}", row.scope.as_deref().unwrap_or("?")),
                format!("retention {}", row.retention.as_deref().unwrap_or("?")),
            ];
            if let Some(key) = &row.key {
                parts.push(format!("key {key}"));
            }
            if let Some(form) = row.form {
                parts.push(form.to_owned());
            }
            if row.store == Some("redis") {
                parts.push("keys in redis".to_owned());
            }
            if let Some(policy) = &row.extra.policy {
                parts.push(format!("policy {policy}"));
            }
            parts.join(", ")
        }
        "none" => format!(
            "suggestion: {}",
            row.suggestion.as_deref().unwrap_or_default()
        ),
        _ => row.reason.clone().unwrap_or_default(),
    }
}

fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "no POST, PUT, PATCH or DELETE routes found\n".into();
    }
    let header = [
        "METHOD",
        "PATH",
        "HANDLER",
        "PROTECTION",
        "DETAIL",
        "LOCATION",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|row| {
            [
                row.method.clone(),
                row.path.clone().unwrap_or_else(|| "?".into()),
                row.handler.clone().unwrap_or_else(|| "?".into()),
                row.protection.to_owned(),
                detail(row),
                format!("{}:{}", row.file, row.line),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for line in std::iter::once(&header).chain(&cells) {
        let text: Vec<String> = line
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    }
    let mut counts = Vec::new();
    for protection in ["idempotent", "layer", "exempt", "none", "unresolved"] {
        let n = rows.iter().filter(|r| r.protection == protection).count();
        if n > 0 {
            counts.push(format!("{n} {protection}"));
        }
    }
    out.push_str(&format!(
        "\n{} mutating routes: {}\n",
        rows.len(),
        counts.join(", ")
    ));
    out
}

fn report_of(rows: &[Row]) -> String {
    let reports: Vec<EndpointReport> = rows.iter().map(endpoint_report).collect();
    if reports.is_empty() {
        return "no POST, PUT, PATCH or DELETE routes found\n".into();
    }
    report::render(&reports)
}

fn endpoint_report(row: &Row) -> EndpointReport {
    let mechanism = match row.protection {
        "idempotent" if row.store == Some("redis") => Mechanism::RedisSteps,
        "idempotent" if row.form == Some("phased") => Mechanism::Phased,
        "idempotent" if row.extra.webhook => Mechanism::WebhookId,
        "idempotent" => Mechanism::KeyTable,
        "layer" => Mechanism::Layer,
        "exempt" => Mechanism::Exempt(row.reason.clone().unwrap_or_default()),
        "none" => Mechanism::None,
        _ => Mechanism::Unresolved,
    };
    let path = row
        .path
        .clone()
        .or_else(|| row.handler.clone())
        .unwrap_or_else(|| format!("(at {}:{})", row.file, row.line));
    let mut report = EndpointReport::new(row.method.clone(), path, mechanism.clone());
    report.scope = row.scope.clone();
    report.retention = row
        .retention
        .as_deref()
        .and_then(|text| crate::show::parse_duration(text).ok());
    report.downstream = match mechanism {
        Mechanism::Phased | Mechanism::RedisSteps => Some(
            row.extra
                .downstream
                .iter()
                .map(|phase| DownstreamKey {
                    phase: phase.clone(),
                    // `Phases::derived_key`'s and `Steps::derived_key`'s format
                    // (idem-runtime's `derive_key`).
                    format: format!("UUID v8 of (scope, key, generation, \"{phase}\")"),
                })
                .collect(),
        ),
        // Only the phased form derives keys (`Phases::derived_key`).
        Mechanism::KeyTable | Mechanism::WebhookId => Some(Vec::new()),
        _ => None,
    };
    report.tests = Tests::Found(row.extra.tests.clone());
    report
}

/// The `.rs` files to read under `path` and the `tests/` folders to scan for the harness.
///
/// A folder with a `Cargo.toml` is a crate or a workspace: the `src/` and `examples/` of
/// it and of every crate below it (not under `target/`, `tests/` or hidden folders). Any
/// other folder is read whole, and its tests are those of its own `tests/` and of the
/// crate it is part of. Files that `#[path = ".."] mod m;` declarations reach are
/// read too, wherever they are.
fn discover(path: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut files = BTreeSet::new();
    let mut tests = Vec::new();
    if path.is_file() {
        files.insert(normalize(path));
    } else if path.join("Cargo.toml").is_file() {
        for entry in walk(path) {
            if entry.file_name() == "Cargo.toml" {
                let root = entry.path().parent().unwrap_or(path);
                for dir in ["src", "examples"] {
                    files.extend(rust_files(&root.join(dir)));
                }
                if root.join("tests").is_dir() {
                    tests.push(root.join("tests"));
                }
            }
        }
    } else {
        files.extend(rust_files(path));
        if path.join("tests").is_dir() {
            tests.push(path.join("tests"));
        }
        // A folder of a crate's sources (an example, a module) is tested by that crate's
        // `tests/`: the nearest folder above with a `Cargo.toml`.
        let package = std::path::absolute(path).ok().and_then(|at| {
            at.ancestors()
                .skip(1)
                .find(|dir| dir.join("Cargo.toml").is_file())
                .map(Path::to_path_buf)
        });
        if let Some(package) = package
            && package.join("tests").is_dir()
            && !tests
                .iter()
                .any(|dir| normalize(dir) == normalize(&package.join("tests")))
        {
            tests.push(package.join("tests"));
        }
    }
    let mut queue: Vec<PathBuf> = files.iter().cloned().collect();
    while let Some(file) = queue.pop() {
        for declared in declared_modules(&file) {
            let declared = normalize(&declared);
            if files.insert(declared.clone()) {
                queue.push(declared);
            }
        }
    }
    (files.into_iter().collect(), tests)
}

/// Entries under `path`, not under `target/`, `tests/` or a hidden folder.
fn walk(path: &Path) -> impl Iterator<Item = walkdir::DirEntry> {
    walkdir::WalkDir::new(path)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            let name = entry.file_name().to_string_lossy();
            entry.depth() == 0
                || !(entry.file_type().is_dir()
                    && (name == "target" || name == "tests" || name.starts_with('.')))
        })
        .flatten()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    if !dir.is_dir() {
        return Vec::new();
    }
    walk(dir)
        .filter(|entry| {
            entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "rs")
        })
        .map(|entry| normalize(entry.path()))
        .collect()
}

/// The files of the `mod name;` declarations in `file` that exist.
fn declared_modules(file: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let Ok(ast) = syn::parse_file(&text) else {
        return Vec::new();
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
    // `mod.rs`, `lib.rs` and `main.rs` keep their modules beside them; `a.rs` in `a/`.
    let own_dir = match stem.as_deref() {
        Some("mod" | "lib" | "main") | None => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
    };
    let mut found = Vec::new();
    for item in &ast.items {
        let syn::Item::Mod(m) = item else { continue };
        if m.content.is_some() {
            continue;
        }
        let explicit = m.attrs.iter().find_map(|attr| match &attr.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("path") => index::string_lit(&nv.value),
            _ => None,
        });
        let name = m.ident.to_string();
        let candidates = match explicit {
            Some(explicit) => vec![dir.join(explicit)],
            None => vec![
                own_dir.join(format!("{name}.rs")),
                own_dir.join(&name).join("mod.rs"),
                dir.join(format!("{name}.rs")),
            ],
        };
        if let Some(file) = candidates.into_iter().find(|c| c.is_file()) {
            found.push(file);
        }
    }
    found
}

/// `a/./b/../c` as `a/c`, without touching the file system, so files are shown as the
/// user named their folder.
fn normalize(path: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.iter().collect()
}
