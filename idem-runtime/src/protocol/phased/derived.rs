//! Keys derived for calls to other services.

use sha2::{Digest, Sha256};

/// See [`Phases::derived_key`] for the format, which must never change: providers
/// deduplicate by it across deploys.
pub(crate) fn derive_key(scope: &str, key: &str, generation: i64, step: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem derived key v1");
    for part in [scope.as_bytes(), key.as_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.update(generation.to_be_bytes());
    hasher.update((step.len() as u64).to_be_bytes());
    hasher.update(step.as_bytes());
    let digest = hasher.finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("SHA-256 has 32 bytes");
    // Version 8 ("custom") and the RFC 9562 variant.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::derive_key;

    #[test]
    fn derived_keys_are_uuids_stable_and_distinct() {
        let key = derive_key("1001", "k", 7, "charge");
        assert_eq!(key, derive_key("1001", "k", 7, "charge"));
        assert_eq!(key.len(), 36);
        assert_eq!(key.as_bytes()[14], b'8', "version 8: {key}");
        assert!(
            matches!(key.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "variant: {key}"
        );
        for other in [
            derive_key("2002", "k", 7, "charge"),
            derive_key("1001", "k2", 7, "charge"),
            derive_key("1001", "k", 8, "charge"),
            derive_key("1001", "k", 7, "refund"),
            // Length prefixes: moving a character across a boundary changes the key.
            derive_key("1001k", "", 7, "charge"),
        ] {
            assert_ne!(key, other);
        }
    }
}
