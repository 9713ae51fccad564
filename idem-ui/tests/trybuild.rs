//! Compile-time errors of `#[idempotent]` (`tests/ui/fail`) and of
//! `#[idem::axum::idempotent]` (`tests/ui/axum/fail`, feature `axum`): the exact error for
//! each mistake. The `.stderr` files are reviewed like code; regenerate them with
//! `TRYBUILD=overwrite cargo test -p idem-ui --test trybuild` on the pinned toolchain.
//!
//! Only failing cases, in one `TestCases`: trybuild then checks them all in one
//! `cargo check --keep-going` (a project with a passing case is built case by case, one
//! cargo run each). The cases that must compile are this crate's binaries
//! (`tests/pass.rs`), built with the rest of the workspace.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.compile_fail("tests/ui/axum/fail/*.rs");
}
