//! What `model_phased.rs` runs on: the steps a sequence is made of and their generator
//! (`steps`), the database statements each backend spells its own way (`store`), the
//! handler under test (`handler`), the reference model and its checks of each answer
//! (`model`), and the run that drives the runtime through one sequence (`run`).
//!
//! `check!` is defined before the modules so that each of them can use it.

/// Fails the sequence with a message, which proptest shows with the shrunk steps.
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(proptest::test_runner::TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

pub(crate) mod handler;
pub(crate) mod model;
pub(crate) mod run;
pub(crate) mod steps;
pub(crate) mod store;
