//! Key parsing never panics, and whatever it accepts is a valid key that parses back
//! to itself: always in the quoted form, and in the bare form unless it starts with a
//! double quote (a bare value starting with one is read as a quoted string).
#![no_main]

use idem_runtime::IdempotencyKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| {
    let Ok(key) = IdempotencyKey::parse(input) else { return };
    let text = key.as_str();
    assert!((1..=255).contains(&text.len()));
    assert!(text.bytes().all(|b| b.is_ascii_graphic()));
    if !text.starts_with('"') {
        assert_eq!(IdempotencyKey::parse(text).as_ref(), Ok(&key), "bare form of {text:?}");
    }
    let quoted = format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
    assert_eq!(IdempotencyKey::parse(&quoted).as_ref(), Ok(&key), "quoted form of {text:?}");
});
