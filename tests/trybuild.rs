//! Compile-time behaviour of `#[idempotent]`: what compiles, and the exact error for
//! each mistake. The `.stderr` files are reviewed like code; regenerate them with
//! `TRYBUILD=overwrite cargo test --test trybuild` on the pinned toolchain.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
