//! JSON fingerprinting never panics or overflows the stack, and whitespace around and
//! inside a document that parses does not change its fingerprint.
#![no_main]

use idem_runtime::Fingerprint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let Ok(fingerprint) = Fingerprint::json("POST", "/orders", body) else { return };
    let mut spaced = b" \n".to_vec();
    spaced.extend_from_slice(body);
    spaced.extend_from_slice(b"\t\r\n");
    assert_eq!(Fingerprint::json("POST", "/orders", &spaced).ok(), Some(fingerprint));
    // The same document as an array's only item is a document too (unless it is already
    // at the nesting limit), and a different one.
    let mut wrapped = b"[".to_vec();
    wrapped.extend_from_slice(body);
    wrapped.push(b']');
    if let Ok(other) = Fingerprint::json("POST", "/orders", &wrapped) {
        assert_ne!(other, fingerprint);
    }
});
