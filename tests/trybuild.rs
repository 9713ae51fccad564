//! Compile-time behaviour of `#[idempotent]` (`ui`) and of `#[idem::axum::idempotent]`
//! (`ui_axum`, feature `axum`): what compiles, and the exact error for each mistake. The
//! `.stderr` files are reviewed like code; regenerate them with
//! `TRYBUILD=overwrite cargo test --test trybuild` on the pinned toolchain.
//!
//! Both in one test binary: trybuild builds the cases of both in its one project under
//! `target/tests/trybuild`, whose dependencies the first build leaves for the second.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

#[test]
fn ui_axum() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/axum/pass/*.rs");
    cases.compile_fail("tests/ui/axum/fail/*.rs");
}
