//! JSON fingerprinting never panics or overflows the stack, and a document that parses
//! gets the same fingerprint as its own compact re-serialization.
#![no_main]

use idem_runtime::Fingerprint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let Ok(fingerprint) = Fingerprint::json("POST", "/orders", body) else { return };
    let value: serde_json::Value = serde_json::from_slice(body).expect("fingerprint parsed it");
    let compact = serde_json::to_vec(&value).expect("serializes");
    assert_eq!(Fingerprint::json("POST", "/orders", &compact).ok(), Some(fingerprint));
});
