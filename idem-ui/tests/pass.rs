//! The UI cases that must compile and run (`tests/ui/pass`, `tests/ui/axum/pass`): each is a
//! binary of this crate, a crate root of its own as trybuild made it, and its `main` must
//! exit successfully (some assert on the registry of the handlers linked into it). The
//! failing cases, with their exact errors, are tests/trybuild.rs's.

use std::path::Path;
use std::process::Command;

/// Runs a case's binary and fails with its output unless it exited successfully.
fn run(name: &str, exe: &str) {
    let output = Command::new(exe)
        .output()
        .unwrap_or_else(|e| panic!("{name}: cannot start {exe}: {e}"));
    assert!(
        output.status.success(),
        "{name} exited with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

/// One test per case, and the list of cases the folder test below compares with the files.
macro_rules! cases {
    ($($test:ident => $bin:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run($bin, env!(concat!("CARGO_BIN_EXE_", $bin)));
            }
        )*
        const CASES: &[&str] = &[$($bin),*];
    };
}

cases! {
    crate_path => "ui-pass-crate-path",
    exempt => "ui-pass-exempt",
    explicit_backend => "ui-pass-explicit-backend",
    idempotent_outside => "ui-pass-idempotent-outside",
    phased => "ui-pass-phased",
    post_outside => "ui-pass-post-outside",
    redis_steps => "ui-pass-redis-steps",
    scope_with_mut_binding => "ui-pass-scope-with-mut-binding",
    sqlite => "ui-pass-sqlite",
    uuid_and_string_scopes => "ui-pass-uuid-and-string-scopes",
    webhook_keys => "ui-pass-webhook-keys",
    axum_handlers => "ui-pass-axum-handlers",
    axum_redis_steps => "ui-pass-axum-redis-steps",
    axum_state => "ui-pass-axum-state",
    axum_state_generic => "ui-pass-axum-state-generic",
    axum_webhook => "ui-pass-axum-webhook",
}

/// The binary name a case file gets in Cargo.toml: `tests/ui/pass/a_b.rs` is `ui-pass-a-b`,
/// `tests/ui/axum/pass/a_b.rs` is `ui-pass-axum-a-b`.
fn bin_name(prefix: &str, file: &Path) -> Option<String> {
    let stem = file.file_name()?.to_str()?.strip_suffix(".rs")?;
    Some(format!("{prefix}{}", stem.replace('_', "-")))
}

/// A case added to a folder without its `[[bin]]` in Cargo.toml and a line in `cases!`
/// would never be built: every file is one of the cases, and every case a file.
#[test]
fn every_case_file_is_a_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut files = Vec::new();
    for (folder, prefix) in [("pass", "ui-pass-"), ("axum/pass", "ui-pass-axum-")] {
        for entry in std::fs::read_dir(root.join(folder)).expect("tests/ui's pass folders") {
            let path = entry.expect("a folder entry").path();
            if let Some(name) = bin_name(prefix, &path) {
                files.push(name);
            }
        }
    }
    files.sort();
    let mut cases: Vec<String> = CASES.iter().map(|c| (*c).to_owned()).collect();
    cases.sort();
    assert_eq!(
        files, cases,
        "each file in idem-ui/tests/ui/pass and idem-ui/tests/ui/axum/pass needs a [[bin]] in idem-ui/Cargo.toml \
         and a line in idem-ui/tests/pass.rs's cases!"
    );
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("idem-ui/Cargo.toml");
    for case in CASES {
        assert!(
            manifest.contains(&format!("name = \"{case}\"")),
            "{case} is not a [[bin]] of idem-ui/Cargo.toml"
        );
    }
}
