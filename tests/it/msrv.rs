//! The declared minimum Rust version (`rust-version` in the workspace's Cargo.toml) is
//! a promise to users: it must be at least every dependency's own minimum, or a user on
//! the declared version gets a build error from a dependency instead of from cargo's
//! version check. Only one toolchain is installed where CI runs, so the promise is kept
//! by reading the lock file's packages rather than by building on the old compiler;
//! clippy's `incompatible_msrv` lint checks idem's own use of the standard library.

use std::process::Command;

use serde_json::Value;

/// `1.94` and `1.94.0` are the same version: missing parts count as zero.
fn version(text: &str) -> [u64; 3] {
    let mut parts = [0; 3];
    for (slot, part) in parts.iter_mut().zip(text.split('.')) {
        *slot = part.parse().expect("a rust-version is numbers and dots");
    }
    parts
}

#[test]
fn versions_compare_by_number_with_missing_parts_as_zero() {
    assert_eq!(version("1.94"), version("1.94.0"));
    assert!(version("1.94.1") > version("1.94"));
    assert!(version("1.100") > version("1.99.9"));
}

#[test]
fn declared_rust_version_covers_every_dependency() {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let packages = metadata["packages"].as_array().expect("a package list");
    let members: Vec<&Value> = metadata["workspace_members"]
        .as_array()
        .expect("a member list")
        .iter()
        .collect();
    let is_member = |package: &Value| members.contains(&&package["id"]);

    let ours = packages
        .iter()
        .find(|package| package["name"] == "idem")
        .and_then(|package| package["rust_version"].as_str())
        .expect("the idem package declares a rust-version");
    let too_new: Vec<String> = packages
        .iter()
        .filter(|package| !is_member(package))
        .filter_map(|package| {
            let needed = package["rust_version"].as_str()?;
            (version(needed) > version(ours)).then(|| {
                format!(
                    "{} {} needs Rust {needed}",
                    package["name"].as_str().unwrap_or_default(),
                    package["version"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version = {ours} in Cargo.toml is older than what these dependencies need; \
         raise it: {too_new:?}"
    );
}

/// The README's test command is the one CI runs (`.ci/run`'s `TEST_CMD`): a newcomer who
/// runs what the front page says runs what CI checks.
#[test]
fn the_readme_test_command_is_the_one_ci_runs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |name: &str| {
        std::fs::read_to_string(root.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    let ci = read(".ci/run");
    let declared = ci
        .lines()
        .find_map(|line| line.strip_prefix("TEST_CMD=("))
        .and_then(|rest| rest.strip_suffix(')'))
        .expect(".ci/run declares TEST_CMD=(...)");
    assert!(ci.contains("\"${TEST_CMD[@]}\""), ".ci/run runs TEST_CMD");
    let readme = read("README.md");
    let after = readme
        .split("Run the tests:")
        .nth(1)
        .expect("the README says how to run the tests");
    let command = after
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().next())
        .expect("a sh block with the command");
    assert_eq!(command, declared);
}
