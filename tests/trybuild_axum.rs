//! Compile-time behaviour of `#[idem::axum::idempotent]`: what compiles, and the exact
//! error for each mistake (feature `axum`). Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test --test trybuild_axum` on the pinned toolchain.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/axum/pass/*.rs");
    cases.compile_fail("tests/ui/axum/fail/*.rs");
}
