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

/// An exact decimal: `-`? digits × 10^exponent, as the generator drew it.
#[derive(Debug, Clone)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// One spelling per value: no leading or trailing zeros in the digits, zero unsigned.
    fn normal(&self) -> (bool, String, i64) {
        let digits = self.digits.trim_start_matches('0');
        let kept = digits.trim_end_matches('0');
        if kept.is_empty() {
            return (false, String::new(), 0);
        }
        let exponent = self.exponent + (digits.len() - kept.len()) as i64;
        (self.negative, kept.to_owned(), exponent)
    }
}

fn decimal() -> impl Strategy<Value = Decimal> {
    // Long digit strings and exponents far past f64's range: exactness is the point.
    (any::<bool>(), "[0-9]{1,40}", -400i64..400).prop_map(|(negative, digits, exponent)| Decimal {
        negative,
        digits,
        exponent,
    })
}

/// How to write a decimal: where the point goes, zeros after it, how the exponent looks.
#[derive(Debug, Clone)]
struct NumberSpelling {
    point: usize,
    trailing_zeros: usize,
    capital_e: bool,
    plus_sign: bool,
    omit_zero_exponent: bool,
}

fn number_spelling() -> impl Strategy<Value = NumberSpelling> {
    (
        0usize..48,
        0usize..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(point, trailing_zeros, capital_e, plus_sign, omit_zero_exponent)| NumberSpelling {
                point,
                trailing_zeros,
                capital_e,
                plus_sign,
                omit_zero_exponent,
            },
        )
}

/// `decimal` as JSON text, spelled `how`.
fn write_number(decimal: &Decimal, how: &NumberSpelling) -> String {
    // JSON allows no leading zeros in the integer part.
    let digits = decimal.digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let point = how.point.min(digits.len());
    let (int, frac) = digits.split_at(point);
    let exponent = decimal.exponent + frac.len() as i64;
    let mut out = String::new();
    if decimal.negative {
        out.push('-');
    }
    out.push_str(if int.is_empty() { "0" } else { int });
    if !frac.is_empty() || how.trailing_zeros > 0 {
        out.push('.');
        out.push_str(frac);
        out.push_str(&"0".repeat(how.trailing_zeros.max(usize::from(frac.is_empty()))));
    }
    if exponent != 0 || !how.omit_zero_exponent {
        out.push(if how.capital_e { 'E' } else { 'e' });
        if exponent >= 0 && how.plus_sign {
            out.push('+');
        }
        out.push_str(&exponent.to_string());
    }
    out
}

proptest! {
    #[test]
    fn spellings_of_one_exact_number_agree(
        value in decimal(),
        a in number_spelling(),
        b in number_spelling(),
    ) {
        let (a, b) = (write_number(&value, &a), write_number(&value, &b));
        prop_assert_eq!(
            fingerprint(&format!("{{\"n\":{a}}}")),
            fingerprint(&format!("{{\"n\":{b}}}")),
            "{} vs {}", a, b
        );
    }

    #[test]
    fn different_exact_numbers_differ(
        x in decimal(),
        y in decimal(),
        a in number_spelling(),
        b in number_spelling(),
    ) {
        prop_assume!(x.normal() != y.normal());
        let (a, b) = (write_number(&x, &a), write_number(&y, &b));
        prop_assert_ne!(fingerprint(&format!("[{a}]")), fingerprint(&format!("[{b}]")), "{} vs {}", a, b);
    }

    #[test]
    fn one_more_in_the_last_digit_is_another_number(
        digits in "[1-9][0-9]{15,40}",
    ) {
        let mut next = digits.clone().into_bytes();
        let last = next.len() - 1;
        next[last] = if next[last] == b'9' { b'8' } else { next[last] + 1 };
        let next = String::from_utf8(next).unwrap();
        prop_assert_ne!(fingerprint(&format!("[{digits}]")), fingerprint(&format!("[{next}]")));
    }
}
