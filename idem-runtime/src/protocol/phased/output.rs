//! What a phase may return: a value idem records when the phase commits and reads back
//! for a retry that takes the attempt over.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The output of a phase ([`Phases::run`](super::Phases::run)): any type that is
/// `serde::Serialize` and `serde::Deserialize` (owned), so that it can be recorded as JSON
/// with the phase and returned again, without running the phase, to an attempt that
/// takes over. Implemented for every such type; there is nothing to implement by hand.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Charge {
///     id: i64,
/// }
///
/// fn recordable<T: idem_runtime::phased::PhaseOutput>() {}
/// recordable::<Charge>();
/// recordable::<(i64, String)>();
/// ```
// One trait in `run`'s bound rather than `Serialize + DeserializeOwned`, so that an
// output type lacking them is one message (per place the compiler checks the bound)
// that names the type and the derive, instead of one per trait in serde's words.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the output of a phase: it must implement `serde::Serialize` and `serde::Deserialize`",
    label = "a phase's output is recorded as JSON, for a retry that takes the attempt over",
    note = "derive both on `{Self}`: `#[derive(serde::Serialize, serde::Deserialize)]`"
)]
pub trait PhaseOutput: Serialize + DeserializeOwned {}

// Without `do_not_recommend` the compiler would skip the message above and report the
// serde trait this impl needs, once for each.
#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> PhaseOutput for T {}
