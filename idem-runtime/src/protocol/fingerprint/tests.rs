//! The fingerprint's unit tests.

use http::header::{CONTENT_TYPE, HeaderMap};

use super::*;

fn json(body: &str) -> Fingerprint {
    Fingerprint::json("POST", "/orders", body.as_bytes()).unwrap()
}

#[test]
fn key_order_and_whitespace_do_not_matter() {
    assert_eq!(
        json(r#"{"a":1,"b":{"y":[1,2],"x":null}}"#),
        json("{\n  \"b\": {\"x\": null, \"y\": [1, 2]},\n  \"a\": 1\n}")
    );
}

#[test]
fn number_spellings_of_one_value_agree() {
    assert_eq!(json("[1]"), json("[1.0]"));
    assert_eq!(json("[100]"), json("[1e2]"));
    assert_eq!(json("[-0.5]"), json("[-5e-1]"));
    assert_ne!(json("[1]"), json("[1.5]"));
}

#[test]
fn content_differences_are_seen() {
    assert_ne!(json(r#"{"a":1}"#), json(r#"{"a":"1"}"#));
    assert_ne!(json("[1,2]"), json("[2,1]"));
    assert_ne!(
        Fingerprint::json("POST", "/orders", b"{}").unwrap(),
        Fingerprint::json("POST", "/orders?x=1", b"{}").unwrap()
    );
    assert_ne!(
        Fingerprint::json("POST", "/a", b"{}").unwrap(),
        Fingerprint::json("PUT", "/a", b"{}").unwrap()
    );
}

#[test]
fn json_and_raw_bodies_never_collide() {
    assert_ne!(json("{}"), Fingerprint::raw("POST", "/orders", b"{}"));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    assert!(Fingerprint::json("POST", "/", deep.as_bytes()).is_err());
}

#[test]
fn integers_beyond_64_bits_are_exact() {
    assert_ne!(
        json(r#"{"amount":18446744073709551616}"#),
        json(r#"{"amount":18446744073709551617}"#)
    );
    assert_ne!(
        json("[-100000000000000000000000000001]"),
        json("[-100000000000000000000000000000]")
    );
    assert_ne!(json("[0.1000000000000000000001]"), json("[0.1]"));
    assert_ne!(json("[9007199254740993]"), json("[9007199254740992]"));
    assert_ne!(json("[9007199254740993.0]"), json("[9007199254740992]"));
}

#[test]
fn spellings_of_one_exact_value_agree() {
    for spellings in [
        &[
            "1", "1.0", "1e0", "10e-1", "0.1e1", "1E+0", "100e-2", "1.000e0",
        ][..],
        &["0", "-0", "0.0", "0e5", "-0.000e-3"],
        &[
            "18446744073709551616",
            "1.8446744073709551616e19",
            "184467440737095516160e-1",
        ],
        &["-0.5", "-5e-1", "-50E-2", "-0.50"],
        &["1e400", "10e399", "0.1e401"],
    ] {
        for spelling in spellings {
            assert_eq!(
                json(&format!("[{}]", spellings[0])),
                json(&format!("[{spelling}]")),
                "{spelling}"
            );
        }
    }
    assert_ne!(json("[1e400]"), json("[1e401]"));
    assert_ne!(json("[1e-400]"), json("[2e-400]"));
}

fn request(target: &str, content_type: Option<&str>, body: &[u8]) -> Fingerprint {
    let mut headers = HeaderMap::new();
    if let Some(content_type) = content_type {
        headers.insert(CONTENT_TYPE, content_type.parse().unwrap());
    }
    Fingerprint::of_request("POST", target, &headers, body).unwrap()
}

#[test]
fn query_parameters_are_compared_decoded_and_by_name() {
    let q = |target: &str| request(target, None, b"");
    assert_eq!(q("/orders?a=1&b=2"), q("/orders?b=2&a=1"));
    assert_eq!(q("/orders?a=1&b=2"), q("/orders?%61=%31&b=2"));
    assert_eq!(q("/orders?n=a+b"), q("/orders?n=a%20b"));
    assert_eq!(q("/orders?a=1&b=2&a=3"), q("/orders?b=2&a=1&a=3"));
    assert_eq!(q("/orders?a=1&&b=2"), q("/orders?b=2&a=1"));
    assert_eq!(q("/orders?"), q("/orders"));
    // Repeated names keep their order: a `Vec` extractor sees it.
    assert_ne!(q("/orders?a=1&a=2"), q("/orders?a=2&a=1"));
    assert_ne!(q("/orders?a=1"), q("/orders?a=2"));
    assert_ne!(q("/orders?a"), q("/orders"));
    assert_ne!(q("/orders?a%3D1=2"), q("/orders?a=1%3D2"));
    assert_ne!(q("/orders?a=1"), q("/orders/?a=1"));
}

#[test]
fn form_fields_are_compared_decoded_and_by_name() {
    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
    let f = |body: &str| request("/orders", FORM, body.as_bytes());
    assert_eq!(f("item=tea&quantity=2"), f("quantity=2&item=tea"));
    assert_eq!(f("item=green+tea"), f("item=green%20tea"));
    assert_eq!(f("tag=a&item=tea&tag=b"), f("item=tea&tag=a&tag=b"));
    assert_ne!(f("tag=a&tag=b"), f("tag=b&tag=a"));
    assert_ne!(f("item=tea"), f("item=coffee"));
    // The same bytes sent as something else are compared byte for byte.
    assert_ne!(
        request("/orders", None, b"a=1&b=2"),
        request("/orders", None, b"b=2&a=1")
    );
    // A form is no query: the body and the target stay apart.
    assert_ne!(f("a=1"), request("/orders?a=1", FORM, b""));
}

#[test]
fn json_content_types_are_recognised() {
    let mut headers = HeaderMap::new();
    for (value, expected) in [
        ("application/json", true),
        ("application/json; charset=utf-8", true),
        ("application/problem+json", true),
        ("Application/JSON", true),
        ("text/plain", false),
        ("application/jsonx", false),
    ] {
        headers.insert(CONTENT_TYPE, value.parse().unwrap());
        assert_eq!(is_json(&headers), expected, "{value}");
    }
}
