//! Without the `encryption` feature stored responses are kept as they are: these
//! pass-throughs stand in for the sealing and opening of `encryption.rs`.

use std::borrow::Cow;

use crate::store::{ClaimRequest, ExistingKey};

/// There is no keyring to keep.
pub(crate) type KeyringSlot = ();

/// What a stored response would be sealed to.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // Only the sealing of `encryption.rs` reads it.
pub(crate) struct Row<'a> {
    pub(crate) scope: &'a str,
    pub(crate) key: &'a str,
    pub(crate) generation: i64,
    pub(crate) status: u16,
}

/// Nothing is sealed without the feature.
pub(crate) fn seals((): &KeyringSlot) -> bool {
    false
}

pub(crate) fn seal<'a>(
    _: &KeyringSlot,
    _: &Row<'_>,
    headers: Vec<u8>,
    body: &'a [u8],
) -> (Vec<u8>, Cow<'a, [u8]>) {
    (headers, Cow::Borrowed(body))
}

pub(crate) fn seal_output(_: &KeyringSlot, _: &Row<'_>, _: &str, json: String) -> String {
    json
}

/// A recorded output in clear; one sealed by a build with the feature cannot be opened.
pub(crate) fn open_output<'a>(
    _: &KeyringSlot,
    _: &Row<'_>,
    _: &str,
    stored: &'a str,
) -> Result<Cow<'a, str>, String> {
    if stored.starts_with(crate::protocol::SEALED_OUTPUT) {
        return Err("sealed, and idem was built without the `encryption` feature".to_owned());
    }
    Ok(Cow::Borrowed(stored))
}

#[allow(clippy::result_large_err, clippy::unnecessary_wraps)]
pub(crate) fn open(
    _: &KeyringSlot,
    _: &ClaimRequest<'_>,
    existing: ExistingKey,
) -> Result<
    ExistingKey,
    (
        crate::protocol::problem::Problem,
        crate::protocol::outcome::Outcome,
    ),
> {
    Ok(existing)
}
