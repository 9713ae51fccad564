//! Stored responses encrypted at rest (feature `encryption`).
//!
//! A response kept for replay may hold personal data for as long as the key's retention.
//! With a [`Keyring`] given to [`Idem::encrypt_with`](crate::Idem::encrypt_with), idem
//! encrypts the stored body and headers with XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`) before they reach the database, and decrypts them to replay. What
//! lookups need stays in clear: the scope, the key, the fingerprint, the method and path,
//! the status and the times.
//!
//! - **Format.** Each stored value is a marker byte `0xFF`, `idem` version `1`, the id of
//!   the key that sealed it (length-prefixed), a random 192-bit nonce, then the
//!   ciphertext and its tag. The associated data binds the value to its row (scope, key,
//!   the key's generation, status) and field, so a value copied into another row or field
//!   does not open, nor does one copied from an earlier life of the same key (the key
//!   reused after its retention) into a later one. Someone who can write to the database
//!   can still put a whole old row back, every column as it was: what a row says about
//!   itself cannot tell it from the original.
//! - **Rotation.** The keyring's current key seals; every key in it opens what it sealed,
//!   found by the id in the value. Add the new key as current, keep the old ones with
//!   [`Keyring::with_old_key`] until every row they sealed has expired (the longest
//!   retention), then drop them.
//! - **Failures.** A value that does not open (tampered, or sealed by a key no longer in
//!   the keyring) is never replayed: the request gets 500 `stored-response-unreadable`
//!   and the error is logged. So is a response in clear: with a keyring, every response
//!   idem stores is sealed, so one without the marker was written by someone else (or
//!   before encryption was turned on). To turn encryption on in a running deployment, let
//!   the older rows replay for the longest retention with
//!   [`Keyring::allow_plaintext_until`].
//!
//! ```
//! use idem_runtime::encryption::Keyring;
//!
//! # fn key_from_config(_: &str) -> [u8; 32] { [7; 32] }
//! # fn app(pool: sqlx::PgPool) {
//! // Keys come from configuration (a secret store, an environment variable): 32 bytes.
//! let keyring = Keyring::new("2026-11", key_from_config("IDEM_KEY_2026_11"))
//!     .with_old_key("2026-05", key_from_config("IDEM_KEY_2026_05"));
//! let idem = idem_runtime::Idem::new(pool).encrypt_with(keyring);
//! # }
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::protocol::SEALED_MARKER as MARKER;
use crate::protocol::SEALED_OUTPUT;
use crate::protocol::outcome::Outcome;
use crate::protocol::problem::{Problem, ProblemKind};
use crate::store::{ClaimRequest, ExistingKey};

/// Nonce length of XChaCha20-Poly1305: random nonces of this size never repeat in
/// practice.
const NONCE_LEN: usize = 24;

/// The keys that seal and open stored responses: one current key that seals, and older
/// ones that still open what they sealed. Its `Debug` output shows the key ids only.
///
/// ```
/// use idem_runtime::encryption::Keyring;
///
/// let keyring = Keyring::new("k2", [2; 32]).with_old_key("k1", [1; 32]);
/// assert_eq!(keyring.current_id(), "k2");
/// assert_eq!(format!("{keyring:?}"), r#"Keyring { current: "k2", old: ["k1"] }"#);
/// ```
#[derive(Clone)]
pub struct Keyring {
    current: (String, XChaCha20Poly1305),
    old: Vec<(String, XChaCha20Poly1305)>,
    /// Until when values stored before encryption was turned on still replay.
    plaintext_until: Option<SystemTime>,
}

impl Keyring {
    /// A keyring whose current key, named `id`, is `key` (32 bytes, e.g. from a secret
    /// store). The id is stored beside every value it seals.
    ///
    /// # Panics
    /// If `id` is empty or longer than 255 bytes.
    ///
    /// ```
    /// let keyring = idem_runtime::encryption::Keyring::new("2026-11", [0x5a; 32]);
    /// ```
    pub fn new(id: &str, key: [u8; 32]) -> Self {
        Self {
            current: (checked_id(id), cipher(key)),
            old: Vec::new(),
            plaintext_until: None,
        }
    }

    /// Adds a key that no longer seals but still opens what it sealed.
    ///
    /// # Panics
    /// If `id` is empty, longer than 255 bytes, or already in the keyring.
    ///
    /// ```
    /// let keyring = idem_runtime::encryption::Keyring::new("new", [2; 32])
    ///     .with_old_key("old", [1; 32]);
    /// ```
    pub fn with_old_key(mut self, id: &str, key: [u8; 32]) -> Self {
        let id = checked_id(id);
        assert!(
            self.current.0 != id && self.old.iter().all(|(old, _)| *old != id),
            "idem: the key id `{id}` is in the keyring twice"
        );
        self.old.push((id, cipher(key)));
        self
    }

    /// Lets responses stored in clear (before encryption was turned on) replay until
    /// `until`, for the migration of a running deployment: set it to the moment encryption
    /// is turned on plus the longest retention, after which no such row is left.
    ///
    /// Without it, a keyring refuses every stored response that is not sealed (500
    /// `stored-response-unreadable`): someone who can write to the database could otherwise
    /// replace a sealed response with one of their own, in clear, and have it replayed to
    /// the client. That is the trade-off of the allowance: while it lasts, such a forged
    /// response is replayed. Responses stored while it lasts are sealed all the same.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use idem_runtime::encryption::Keyring;
    ///
    /// // Encryption turned on today; the longest retention is 7 days.
    /// let turned_on = SystemTime::now();
    /// let keyring = Keyring::new("2026-11", [0x5a; 32])
    ///     .allow_plaintext_until(turned_on + Duration::from_secs(7 * 24 * 3600));
    /// # let _ = keyring;
    /// ```
    pub fn allow_plaintext_until(mut self, until: SystemTime) -> Self {
        self.plaintext_until = Some(until);
        self
    }

    /// Whether a value stored in clear may replay now.
    fn plaintext_allowed(&self) -> bool {
        self.plaintext_until
            .is_some_and(|until| SystemTime::now() < until)
    }

    /// The id of the key that seals new values.
    ///
    /// ```
    /// let keyring = idem_runtime::encryption::Keyring::new("k1", [1; 32]);
    /// assert_eq!(keyring.current_id(), "k1");
    /// ```
    pub fn current_id(&self) -> &str {
        &self.current.0
    }

    fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        let (id, cipher) = &self.current;
        let nonce = XNonce::generate();
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any response idem stores");
        let mut out = Vec::with_capacity(MARKER.len() + 1 + id.len() + NONCE_LEN + sealed.len());
        out.extend_from_slice(MARKER);
        out.push(u8::try_from(id.len()).expect("ids are at most 255 bytes"));
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    fn open(&self, stored: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        let rest = &stored[MARKER.len()..];
        let (&id_len, rest) = rest.split_first().ok_or("truncated")?;
        let id_len = usize::from(id_len);
        if rest.len() < id_len + NONCE_LEN {
            return Err("truncated".to_owned());
        }
        let (id, rest) = rest.split_at(id_len);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let id = String::from_utf8_lossy(id);
        let cipher = std::iter::once(&self.current)
            .chain(&self.old)
            .find(|(known, _)| *known == id)
            .map(|(_, cipher)| cipher)
            .ok_or_else(|| format!("sealed with key `{id}`, which is not in the keyring"))?;
        let nonce = XNonce::try_from(nonce).map_err(|_| "truncated")?;
        cipher
            .decrypt(&nonce, Payload { msg: sealed, aad })
            .map_err(|_| format!("does not open with key `{id}`: altered or corrupted"))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Keyring");
        f.field("current", &self.current.0).field(
            "old",
            &self.old.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        );
        if let Some(until) = self.plaintext_until {
            f.field("plaintext_until", &until);
        }
        f.finish()
    }
}

fn checked_id(id: &str) -> String {
    assert!(
        !id.is_empty() && id.len() <= 255,
        "idem: a key id is 1 to 255 bytes, not {} bytes",
        id.len()
    );
    id.to_owned()
}

fn cipher(key: [u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&Key::from(key))
}

/// Where `Idem` keeps its keyring; empty unless `encrypt_with` was called.
pub(crate) type KeyringSlot = Option<Arc<Keyring>>;

/// What a stored response is sealed to: its key row, in one life of the key, and its
/// status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(crate) scope: &'a str,
    pub(crate) key: &'a str,
    /// Without it, the response of an earlier life of the key (the key reused after its
    /// retention) would open in the row of a later one, copied there.
    pub(crate) generation: i64,
    pub(crate) status: u16,
}

/// Whether `keyring` seals what is stored.
pub(crate) fn seals(keyring: &KeyringSlot) -> bool {
    keyring.is_some()
}

/// Binds a sealed value to its row and field.
fn associated_data(row: &Row<'_>, field: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(64 + row.scope.len() + row.key.len());
    aad.extend_from_slice(b"idem stored response v2");
    for part in [row.scope.as_bytes(), row.key.as_bytes(), field.as_bytes()] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part);
    }
    aad.extend_from_slice(&row.generation.to_be_bytes());
    aad.extend_from_slice(&row.status.to_be_bytes());
    aad
}

/// The response's headers and body as they are to be stored: sealed when the keyring
/// holds a key, as they are otherwise.
pub(crate) fn seal<'a>(
    keyring: &KeyringSlot,
    row: &Row<'_>,
    headers: Vec<u8>,
    body: &'a [u8],
) -> (Vec<u8>, Cow<'a, [u8]>) {
    let Some(keyring) = keyring else {
        return (headers, Cow::Borrowed(body));
    };
    let aad = |field| associated_data(row, field);
    (
        keyring.seal(&headers, &aad("headers")),
        Cow::Owned(keyring.seal(body, &aad("body"))),
    )
}

/// A phase's output as it is to be recorded: sealed to its key row's life and the
/// phase's name when the keyring holds a key (so it opens nowhere else, not as another
/// phase's nor as a response), as it is otherwise.
pub(crate) fn seal_output(
    keyring: &KeyringSlot,
    row: &Row<'_>,
    phase: &str,
    json: String,
) -> String {
    let Some(keyring) = keyring else {
        return json;
    };
    let sealed = keyring.seal(json.as_bytes(), &associated_data(row, &phase_field(phase)));
    let mut out = String::with_capacity(SEALED_OUTPUT.len() + sealed.len() * 4 / 3 + 4);
    out.push_str(SEALED_OUTPUT);
    BASE64.encode_string(&sealed, &mut out);
    out.push('"');
    out
}

/// A recorded phase output in clear, or why it cannot be trusted: it does not open, or
/// it is in clear although the keyring seals every output (and allows none in clear).
pub(crate) fn open_output<'a>(
    keyring: &KeyringSlot,
    row: &Row<'_>,
    phase: &str,
    stored: &'a str,
) -> Result<Cow<'a, str>, String> {
    let Some(encoded) = stored
        .strip_prefix(SEALED_OUTPUT)
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return match keyring {
            Some(keyring) if !keyring.plaintext_allowed() => Err("not sealed".to_owned()),
            _ => Ok(Cow::Borrowed(stored)),
        };
    };
    let Some(keyring) = keyring else {
        return Err("sealed, and idem has no keyring (Idem::encrypt_with)".to_owned());
    };
    let sealed = BASE64
        .decode(encoded)
        .map_err(|_| "altered or corrupted".to_owned())?;
    let clear = keyring.open(&sealed, &associated_data(row, &phase_field(phase)))?;
    String::from_utf8(clear)
        .map(Cow::Owned)
        .map_err(|_| "altered or corrupted".to_owned())
}

fn phase_field(phase: &str) -> String {
    format!("phase {phase}")
}

/// The stored response of `existing` in clear, or the 500 that a value which does not
/// open gets instead of a replay.
pub(crate) fn open(
    keyring: &KeyringSlot,
    claim: &ClaimRequest<'_>,
    mut existing: ExistingKey,
) -> Result<ExistingKey, (Problem, Outcome)> {
    let row = Row {
        scope: claim.scope,
        key: claim.key,
        generation: existing.generation,
        status: existing
            .response_status
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(0),
    };
    if existing.completed
        && let Some(keyring) = keyring
        && !keyring.plaintext_allowed()
        && [&existing.response_headers, &existing.response_body]
            .iter()
            .any(|value| !value.as_deref().is_some_and(|v| v.starts_with(MARKER)))
    {
        // Every response stored with a keyring is sealed, so one that is not was stored
        // before encryption was turned on, or written by someone else.
        return Err(unreadable("headers or body", "not sealed"));
    }
    for (field, value) in [
        ("headers", &mut existing.response_headers),
        ("body", &mut existing.response_body),
    ] {
        let Some(stored) = value.as_deref() else {
            continue;
        };
        if !stored.starts_with(MARKER) {
            continue; // stored in clear, and allowed above
        }
        let opened = match keyring {
            Some(keyring) => keyring.open(stored, &associated_data(&row, field)),
            None => Err("sealed, and idem has no keyring (Idem::encrypt_with)".to_owned()),
        };
        match opened {
            Ok(clear) => *value = Some(clear.into()),
            Err(reason) => return Err(unreadable(field, &reason)),
        }
    }
    Ok(existing)
}

/// The 500 a stored response gets instead of a replay when it cannot be trusted.
fn unreadable(field: &str, reason: &str) -> (Problem, Outcome) {
    tracing::error!(
        field,
        reason,
        "a stored response does not decrypt; not replayed"
    );
    let problem = ProblemKind::StoredResponseUnreadable
        .problem("the stored response to this request cannot be read; nothing was replayed");
    (problem, Outcome::Unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_row_and_an_intact_ciphertext() {
        let keyring = Keyring::new("k1", [1; 32]);
        let row = Row {
            scope: "acct",
            key: "key",
            generation: 7,
            status: 201,
        };
        let aad = associated_data(&row, "body");
        let sealed = keyring.seal(b"{\"id\":1}", &aad);
        assert!(sealed.starts_with(MARKER));
        assert_eq!(keyring.open(&sealed, &aad).unwrap(), b"{\"id\":1}");
        for other in [
            Row {
                key: "other",
                ..row
            },
            Row {
                scope: "other",
                ..row
            },
            Row { status: 200, ..row },
            Row {
                generation: 8,
                ..row
            },
        ] {
            assert!(
                keyring
                    .open(&sealed, &associated_data(&other, "body"))
                    .is_err()
            );
        }
        assert!(
            keyring
                .open(&sealed, &associated_data(&row, "headers"))
                .is_err()
        );
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(keyring.open(&flipped, &aad).is_err());
        assert!(keyring.open(&sealed[..MARKER.len() + 3], &aad).is_err());
    }

    #[test]
    fn old_keys_open_and_the_current_key_seals() {
        let old = Keyring::new("k1", [1; 32]);
        let row = Row {
            scope: "s",
            key: "k",
            generation: 1,
            status: 201,
        };
        let aad = associated_data(&row, "headers");
        let sealed_by_old = old.seal(b"location: /x\r\n", &aad);
        let rotated = Keyring::new("k2", [2; 32]).with_old_key("k1", [1; 32]);
        assert_eq!(
            rotated.open(&sealed_by_old, &aad).unwrap(),
            b"location: /x\r\n"
        );
        let sealed_by_new = rotated.seal(b"x", &aad);
        let error = old.open(&sealed_by_new, &aad).unwrap_err();
        assert!(error.contains("`k2`"), "{error}");
    }
}
