//! Property tests: JSON that means the same gets the same fingerprint, whatever its
//! key order, whitespace or number spelling; JSON that means something else does not.

use idem_runtime::Fingerprint;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Arbitrary JSON documents, a few levels deep.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Integral floats are the same value as integers (`2.0` is `2`), so generated
        // floats are never integral: two generated documents that differ then differ in
        // meaning, which the inequality property below relies on.
        (-1.0e12f64..1.0e12)
            .prop_filter("not integral", |f| f.fract() != 0.0)
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// How to spell a document differently without changing what it means.
#[derive(Debug, Clone)]
struct Spelling {
    reverse_keys: bool,
    space: &'static str,
    integer_as_float: bool,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        any::<bool>(),
        prop_oneof![Just(""), Just(" "), Just("\n  "), Just("\t")],
        any::<bool>(),
    )
        .prop_map(|(reverse_keys, space, integer_as_float)| Spelling {
            reverse_keys,
            space,
            integer_as_float,
        })
}

fn render(value: &Value, how: &Spelling, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push('{');
            let mut entries: Vec<_> = map.iter().collect();
            if how.reverse_keys {
                entries.reverse();
            }
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(how.space);
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push_str(how.space);
                out.push(':');
                out.push_str(how.space);
                render(item, how, out);
            }
            out.push_str(how.space);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    out.push_str(how.space);
                }
                render(item, how, out);
            }
            out.push(']');
        }
        // Integers that f64 holds exactly may be written as floats: `7.0`, `7e0`.
        Value::Number(n)
            if how.integer_as_float && n.as_i64().is_some_and(|i| i.abs() < 1 << 52) =>
        {
            out.push_str(&format!("{}e0", n.as_i64().unwrap()));
        }
        other => out.push_str(&other.to_string()),
    }
}

fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::json("POST", "/orders", body.as_bytes()).expect("valid JSON")
}

proptest! {
    #[test]
    fn equivalent_spellings_share_a_fingerprint(value in json(), how in spelling()) {
        let compact = serde_json::to_string(&value).unwrap();
        let mut other = String::new();
        render(&value, &how, &mut other);
        prop_assert_eq!(fingerprint(&compact), fingerprint(&other), "{} vs {}", compact, other);
    }

    #[test]
    fn different_documents_get_different_fingerprints(a in json(), b in json()) {
        prop_assume!(a != b);
        let (a, b) = (serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        prop_assert_ne!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn a_changed_leaf_changes_the_fingerprint(value in json(), extra in "\\PC{1,8}") {
        let original = serde_json::to_string(&value).unwrap();
        let wrapped = serde_json::to_string(&serde_json::json!({ "v": value, "extra": extra })).unwrap();
        prop_assert_ne!(fingerprint(&original), fingerprint(&wrapped));
    }
}
