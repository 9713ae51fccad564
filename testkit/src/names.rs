//! Unique names, for the databases and directories tests create side by side, in this
//! process and in others running at the same time.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A database name unique to this process and, with high probability, to all processes.
pub(crate) fn unique_db_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: OnceLock<u32> = OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS; mix in the clock for good measure.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos_since_epoch());
        h.finish() as u32
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("idem_test_{}_{n}_{salt:08x}", std::process::id())
}

pub(crate) fn nanos_since_epoch() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_valid() {
        let a = unique_db_name();
        let b = unique_db_name();
        assert_ne!(a, b);
        assert!(a.len() < 63);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        );
    }
}
