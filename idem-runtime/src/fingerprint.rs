//! The request fingerprint: what makes two requests "the same payload".

use std::io::{self, Write};

use actix_web::http::header::{CONTENT_TYPE, HeaderMap};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 over a request's method, path with query, and body.
///
/// JSON bodies (a `Content-Type` of `application/json` or any `+json` type) are
/// canonicalized first: object keys sorted, insignificant whitespace dropped, and
/// numbers written in one form (`1.0`, `1e0` and `1` are the same value), so a
/// client that reorders keys or pretty-prints on a retry is not told its payload
/// changed. Other bodies are hashed byte for byte.
///
/// ```
/// use idem_runtime::Fingerprint;
///
/// let a = Fingerprint::json("POST", "/orders", br#"{"item":"tea","quantity":2}"#).unwrap();
/// let b = Fingerprint::json("POST", "/orders", b"{ \"quantity\": 2.0, \"item\": \"tea\" }").unwrap();
/// assert_eq!(a, b);
/// let c = Fingerprint::json("POST", "/orders", br#"{"item":"tea","quantity":3}"#).unwrap();
/// assert_ne!(a, c);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// The body claimed to be JSON but is not; the message is shown to the client.
#[derive(Debug)]
pub struct InvalidJson(serde_json::Error);

impl std::fmt::Display for InvalidJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body is not valid JSON: {}", self.0)
    }
}

impl std::error::Error for InvalidJson {}

impl Fingerprint {
    /// Fingerprints a request, choosing JSON canonicalization from its `Content-Type`.
    ///
    /// ```
    /// use actix_web::http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
    /// use idem_runtime::Fingerprint;
    ///
    /// let mut json = HeaderMap::new();
    /// json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    /// let a = Fingerprint::of_request("POST", "/orders", &json, br#"{"a":1,"b":2}"#).unwrap();
    /// let b = Fingerprint::of_request("POST", "/orders", &json, br#"{"b":2, "a":1}"#).unwrap();
    /// assert_eq!(a, b);
    ///
    /// // Without a JSON content type the bytes themselves count.
    /// let text = HeaderMap::new();
    /// let c = Fingerprint::of_request("POST", "/orders", &text, br#"{"b":2, "a":1}"#).unwrap();
    /// assert_ne!(a, c);
    /// ```
    pub fn of_request(
        method: &str,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Self, InvalidJson> {
        // An empty body is no JSON document; some clients send one with a JSON type.
        if is_json(headers) && !body.is_empty() {
            Self::json(method, path_and_query, body)
        } else {
            Ok(Self::raw(method, path_and_query, body))
        }
    }

    /// Fingerprints a JSON body in canonical form.
    pub fn json(method: &str, path_and_query: &str, body: &[u8]) -> Result<Self, InvalidJson> {
        let value: Value = serde_json::from_slice(body).map_err(InvalidJson)?;
        let mut hasher = head(method, path_and_query, b'j');
        write_canonical(&mut HashWriter(&mut hasher), &value)
            .expect("hashing into memory cannot fail");
        Ok(Self(hasher.finalize().into()))
    }

    /// Fingerprints a body byte for byte.
    pub fn raw(method: &str, path_and_query: &str, body: &[u8]) -> Self {
        let mut hasher = head(method, path_and_query, b'r');
        hasher.update(body);
        Self(hasher.finalize().into())
    }

    /// Restores a fingerprint read back from storage.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Method and path are separated by NUL, which neither can contain, and the body kind
/// is tagged, so no two different (method, path, body) triples share a hash input.
fn head(method: &str, path_and_query: &str, kind: u8) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(method.as_bytes());
    hasher.update([0]);
    hasher.update(path_and_query.as_bytes());
    hasher.update([0, kind]);
    hasher
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"))
}

struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes compact JSON with sorted keys (serde_json's map is ordered without the
/// `preserve_order` feature) and one spelling per number. Recursion depth is bounded
/// by serde_json's parser, which refuses documents nested deeper than 128 levels.
fn write_canonical(out: &mut impl Write, value: &Value) -> io::Result<()> {
    match value {
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(out, item)?;
            }
            out.write_all(b"]")
        }
        Value::Object(map) => {
            out.write_all(b"{")?;
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key)?;
                out.write_all(b":")?;
                write_canonical(out, item)?;
            }
            out.write_all(b"}")
        }
        Value::Number(n) => match n.as_f64() {
            // Integral floats within f64's exact range are written as integers, so `2.0`,
            // `2e0` and `2` agree; u64/i64 values are already integers.
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                write!(out, "{}", f as i64)
            }
            _ => write!(out, "{n}"),
        },
        scalar => serde_json::to_writer(out, scalar).map_err(io::Error::other),
    }
}

#[cfg(test)]
mod tests {
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
}
