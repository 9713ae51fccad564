//! Which of `idem::testing`'s checks an application's tests run for a route: a source scan
//! of its `tests/` folder for `Endpoint::post("/orders")` (or another method) and the
//! check calls that follow it in the same function (`.concurrency(`, `.replay(`,
//! `.mismatch(`, `.crash_resume(`, `.all(` ...).

use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;

use super::index::flatten;

/// The harness's check methods and the names the report gives them.
const CHECKS: [(&str, &str); 7] = [
    ("concurrency", "concurrency"),
    ("replay", "replay"),
    ("mismatch", "mismatch"),
    ("missing_key", "missing key"),
    ("transient_failure", "transient failure"),
    ("crash_resume", "crash-resume"),
    ("expiry", "expiry"),
];

/// One endpoint a test names and the checks it runs on it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tested {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) checks: Vec<String>,
    /// `.all(..)`: every check that applies to the endpoint's form.
    pub(crate) all: bool,
}

/// Scans every `.rs` file under `dir`; a file that does not parse is skipped.
pub(crate) fn scan(dir: &Path) -> Vec<Tested> {
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .flatten()
    {
        if entry.path().extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(file) = syn::parse_file(&text) else {
            continue;
        };
        fns(&file.items, &mut found);
    }
    found
}

fn fns(items: &[syn::Item], found: &mut Vec<Tested>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => body(&f.block.to_token_stream(), found),
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    fns(items, found);
                }
            }
            _ => {}
        }
    }
}

/// Checks after an `Endpoint::method("path")` belong to it, up to the next one.
fn body(tokens: &TokenStream, found: &mut Vec<Tested>) {
    let trees = flatten(tokens);
    let mut current: Option<usize> = None;
    for (i, tree) in trees.iter().enumerate() {
        let TokenTree::Ident(ident) = tree else {
            continue;
        };
        if ident == "Endpoint"
            && let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                (trees.get(i + 1), trees.get(i + 2))
            && a.as_char() == ':'
            && b.as_char() == ':'
            && let Some(TokenTree::Ident(method)) = trees.get(i + 3)
            && let Some(TokenTree::Group(args)) = trees.get(i + 4)
            && let Some(TokenTree::Literal(lit)) = args.stream().into_iter().next()
            && let Ok(syn::Lit::Str(path)) = syn::parse2::<syn::Lit>(lit.into_token_stream())
        {
            found.push(Tested {
                method: method.to_string().to_ascii_uppercase(),
                path: path.value(),
                ..Tested::default()
            });
            current = Some(found.len() - 1);
            continue;
        }
        let dotted =
            matches!(trees.get(i.wrapping_sub(1)), Some(TokenTree::Punct(p)) if p.as_char() == '.');
        let (Some(at), true) = (current, dotted) else {
            continue;
        };
        let name = ident.to_string();
        if name == "all" {
            found[at].all = true;
        } else if let Some((_, shown)) = CHECKS.iter().find(|(method, _)| *method == name)
            && !found[at].checks.iter().any(|c| c == shown)
        {
            found[at].checks.push((*shown).to_owned());
        }
    }
}

/// Whether a test's concrete path (`/orders/42`) is the route's pattern (`/orders/{id}`).
pub(crate) fn matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    let path: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    pattern.len() == path.len()
        && pattern
            .iter()
            .zip(&path)
            .all(|(p, s)| p == s || p.starts_with('{') || p.starts_with(':') || p.starts_with('*'))
}

/// The checks the tests run for `method path`, in the harness's order; the `.all(..)`
/// set is every check that applies (crash-resume only to a phased handler).
pub(crate) fn checks_for(tests: &[Tested], method: &str, path: &str, phased: bool) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    for tested in tests
        .iter()
        .filter(|t| t.method == method && matches(path, &t.path))
    {
        for (_, shown) in CHECKS {
            let applies = shown != "crash-resume" || phased;
            if (tested.all && applies || tested.checks.iter().any(|c| c == shown))
                && !names.contains(&shown)
            {
                names.push(shown);
            }
        }
    }
    names.into_iter().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concrete_path_matches_its_pattern() {
        assert!(matches("/orders/{id}", "/orders/42"));
        assert!(matches("/users/:id", "/users/7/"));
        assert!(matches("/orders", "/orders"));
        assert!(!matches("/orders/{id}", "/orders"));
        assert!(!matches("/orders", "/payments"));
    }

    #[test]
    fn all_runs_crash_resume_only_for_a_phased_handler() {
        let tested = [Tested {
            method: "POST".into(),
            path: "/orders".into(),
            checks: Vec::new(),
            all: true,
        }];
        assert!(
            !checks_for(&tested, "POST", "/orders", false).contains(&"crash-resume".to_owned())
        );
        assert!(checks_for(&tested, "POST", "/orders", true).contains(&"crash-resume".to_owned()));
        assert!(checks_for(&tested, "PUT", "/orders", true).is_empty());
    }
}
