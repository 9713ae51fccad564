//! The request fingerprint: what makes two requests "the same payload".
//!
//! A fingerprint covers what the handler's extractors read, in one spelling per meaning:
//!
//! - the method, byte for byte;
//! - the path without its query, byte for byte as it was sent (`/a%62` and `/ab` are two
//!   paths: percent-decoding a path could merge `%2F` with `/`);
//! - the query, as its parameters: split at `&`, each percent-decoded (`+` is a space),
//!   sorted by name with repeated names kept in the order they were sent, as
//!   [`Fingerprint::canonical_target`] writes them;
//! - the body, decoded from its `Content-Encoding` by the caller (idem's handlers do it
//!   before they call [`Fingerprint::of_request`]), then by its `Content-Type`:
//!   JSON canonicalized (see [`Fingerprint::json`]), form fields like the query (see
//!   [`Fingerprint::form`]), anything else byte for byte.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use super::headers::{Headers, first_text};
use form::canonical_fields;
use json::Parser;

pub(crate) mod decode;
mod form;
mod json;
#[cfg(test)]
mod tests;

/// SHA-256 over a request's method, target and body, each in canonical form.
///
/// JSON bodies (a `Content-Type` of `application/json` or any `+json` type) are
/// canonicalized first: object members sorted by name, insignificant whitespace dropped,
/// strings written with one escape per character, and numbers in one exact form (`1.0`,
/// `1e0`, `10e-1` and `1` are the same value; `18446744073709551616` and
/// `18446744073709551617` are not), so a client that reorders members or pretty-prints on
/// a retry is not told its payload changed. Form bodies and query strings are compared as
/// their decoded fields. Other bodies are hashed byte for byte.
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
///
/// ```
/// use idem_runtime::Fingerprint;
///
/// let error = Fingerprint::json("POST", "/orders", b"{\"a\":}").unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "the request body is not valid JSON: expected a value at byte 5"
/// );
/// ```
#[derive(Debug)]
pub struct InvalidJson {
    pub(super) reason: &'static str,
    pub(super) offset: usize,
}

impl std::fmt::Display for InvalidJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body is not valid JSON: {} at byte {}",
            self.reason, self.offset
        )
    }
}

impl std::error::Error for InvalidJson {}

impl Fingerprint {
    /// Fingerprints a request, choosing JSON or form canonicalization from its
    /// `Content-Type`. `body` is the decoded content: a compressed body is decompressed
    /// before it is fingerprinted, as the extractors see it.
    ///
    /// ```
    /// use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
    /// use idem_runtime::Fingerprint;
    ///
    /// let mut json = HeaderMap::new();
    /// json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    /// let a = Fingerprint::of_request("POST", "/orders?a=1&b=2", &json, br#"{"a":1,"b":2}"#).unwrap();
    /// let b = Fingerprint::of_request("POST", "/orders?b=2&a=1", &json, br#"{"b":2, "a":1}"#).unwrap();
    /// assert_eq!(a, b);
    ///
    /// // Without a JSON or form content type the bytes themselves count.
    /// let text = HeaderMap::new();
    /// let c = Fingerprint::of_request("POST", "/orders?a=1&b=2", &text, br#"{"b":2, "a":1}"#).unwrap();
    /// assert_ne!(a, c);
    /// ```
    pub fn of_request(
        method: &str,
        path_and_query: &str,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Self, InvalidJson> {
        match body_kind(headers) {
            // An empty body is no JSON document; some clients send one with a JSON type.
            BodyKind::Json if !body.is_empty() => Self::json(method, path_and_query, body),
            BodyKind::Form => Ok(Self::form(method, path_and_query, body)),
            _ => Ok(Self::raw(method, path_and_query, body)),
        }
    }

    /// Fingerprints a JSON body in canonical form.
    ///
    /// The body is read once, front to back, and written into the hash as it is read:
    /// only an object's members are held (in their canonical form) until the object ends,
    /// to sort them, so the memory needed is at most a small multiple of the body. Numbers
    /// are compared as the exact decimals they spell, never through a float; members with
    /// the same name are all kept, in the order sent. Nesting deeper than 127 levels is
    /// refused, as serde_json refuses it.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// let fp = |body: &str| Fingerprint::json("POST", "/pay", body.as_bytes()).unwrap();
    /// assert_eq!(fp(r#"{"amount":1}"#), fp(r#"{"amount":10e-1}"#));
    /// assert_ne!(fp(r#"{"amount":18446744073709551616}"#), fp(r#"{"amount":18446744073709551617}"#));
    /// assert_eq!(fp(r#"{"name":"caf\u00e9"}"#), fp(r#"{"name":"café"}"#));
    /// ```
    pub fn json(method: &str, path_and_query: &str, body: &[u8]) -> Result<Self, InvalidJson> {
        // JSON text is UTF-8 (RFC 8259, 8.1); outside strings only ASCII is valid anyway.
        if let Err(error) = std::str::from_utf8(body) {
            return Err(InvalidJson {
                reason: "invalid UTF-8",
                offset: error.valid_up_to(),
            });
        }
        let mut hasher = head(method, path_and_query, b'j');
        Parser { text: body, pos: 0 }.document(&mut hasher)?;
        Ok(Self(hasher.finalize().into()))
    }

    /// Fingerprints an `application/x-www-form-urlencoded` body as its fields: decoded,
    /// sorted by name, repeated names in the order sent.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// let a = Fingerprint::form("POST", "/orders", b"item=green+tea&quantity=2");
    /// let b = Fingerprint::form("POST", "/orders", b"quantity=2&item=green%20tea");
    /// assert_eq!(a, b);
    /// ```
    pub fn form(method: &str, path_and_query: &str, body: &[u8]) -> Self {
        let mut hasher = head(method, path_and_query, b'f');
        hasher.update(canonical_fields(body));
        Self(hasher.finalize().into())
    }

    /// Fingerprints a body byte for byte.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// let a = Fingerprint::raw("PUT", "/files/7", b"\x00\x01");
    /// assert_ne!(a, Fingerprint::raw("PUT", "/files/7", b"\x01\x00"));
    /// ```
    pub fn raw(method: &str, path_and_query: &str, body: &[u8]) -> Self {
        let mut hasher = head(method, path_and_query, b'r');
        hasher.update(body);
        Self(hasher.finalize().into())
    }

    /// Fingerprints a signed webhook's delivery by what its sender signed, the event's id
    /// (`webhook-id`) and the body byte for byte as sent, and by the handler that receives
    /// it. The method, the query, `Content-Type` and `Content-Encoding` are left out: no
    /// one signed them, so anyone holding a captured delivery could change them, and a
    /// first request that changed them would take the event's id with an answer the
    /// sender's own delivery then could not match.
    pub(crate) fn signed(module_path: &str, handler: &str, id: &str, raw_body: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        // Tagged apart from `head`'s inputs, which begin with a method (a token, never
        // NUL); each part but the body ends with a NUL none of them can contain.
        hasher.update([0, b'w']);
        for part in [module_path, handler, id] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.update(raw_body);
        Self(hasher.finalize().into())
    }

    /// The request target in the form the fingerprint covers and the key store records:
    /// the path as sent, then the query's parameters decoded, sorted by name (repeated
    /// names keep their order) and written again with every byte outside `A-Z a-z 0-9 - .
    /// _ ~` percent-encoded. An empty query is no query.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// assert_eq!(Fingerprint::canonical_target("/orders?b=x+y&a=1"), "/orders?a=1&b=x%20y");
    /// assert_eq!(Fingerprint::canonical_target("/orders?"), "/orders");
    /// assert_eq!(Fingerprint::canonical_target("/orders?tag=b&tag=a"), "/orders?tag=b&tag=a");
    /// ```
    pub fn canonical_target(path_and_query: &str) -> Cow<'_, str> {
        let Some((path, query)) = path_and_query.split_once('?') else {
            return Cow::Borrowed(path_and_query);
        };
        let fields = canonical_fields(query.as_bytes());
        if fields.is_empty() {
            return Cow::Borrowed(path);
        }
        if fields == query.as_bytes() {
            return Cow::Borrowed(path_and_query);
        }
        // Every byte of `fields` is ASCII: `canonical_fields` percent-encodes the rest.
        let fields = String::from_utf8(fields).expect("percent-encoded text is ASCII");
        Cow::Owned(format!("{path}?{fields}"))
    }

    /// Restores a fingerprint read back from storage.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// let fp = Fingerprint::raw("POST", "/", b"");
    /// assert_eq!(Fingerprint::from_bytes(fp.as_bytes()), Some(fp));
    /// assert_eq!(Fingerprint::from_bytes(b"short"), None);
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The 32 bytes of the digest.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    ///
    /// assert_eq!(Fingerprint::raw("POST", "/", b"").as_bytes().len(), 32);
    /// ```
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

/// Method and target are separated by NUL, which neither can contain, and the body kind
/// is tagged, so no two different (method, target, body) triples share a hash input.
fn head(method: &str, path_and_query: &str, kind: u8) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(method.as_bytes());
    hasher.update([0]);
    hasher.update(Fingerprint::canonical_target(path_and_query).as_bytes());
    hasher.update([0, kind]);
    hasher
}

#[derive(Debug, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
    Other,
}

fn body_kind(headers: &(impl Headers + ?Sized)) -> BodyKind {
    let Some(value) = first_text(headers, "content-type") else {
        return BodyKind::Other;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return BodyKind::Other;
    };
    if !kind.eq_ignore_ascii_case("application") {
        return BodyKind::Other;
    }
    if subtype.eq_ignore_ascii_case("json")
        || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json")
    {
        BodyKind::Json
    } else if subtype.eq_ignore_ascii_case("x-www-form-urlencoded") {
        BodyKind::Form
    } else {
        BodyKind::Other
    }
}

#[cfg(test)]
fn is_json(headers: &http::HeaderMap) -> bool {
    body_kind(headers) == BodyKind::Json
}
