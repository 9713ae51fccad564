//! How the core reads request headers, whatever `http` version the framework uses.

use http::HeaderName;

/// Name of the request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Read access to a request's headers, implemented for `http` 1.x's `HeaderMap` here and
/// for each web framework's own map by its adapter (actix-web 4 is on `http` 0.2), so the
/// core reads the few headers it needs without converting the whole map.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use idem_runtime::Headers;
///
/// let mut headers = HeaderMap::new();
/// headers.append("idempotency-key", HeaderValue::from_static("a"));
/// assert_eq!(headers.lookup("idempotency-key"), Some((&b"a"[..], false)));
/// headers.append("idempotency-key", HeaderValue::from_static("b"));
/// assert_eq!(headers.lookup("idempotency-key"), Some((&b"a"[..], true)));
/// assert_eq!(headers.lookup("content-type"), None);
/// ```
pub trait Headers {
    /// The first value of the header `name` (lowercase), and whether another follows it.
    fn lookup(&self, name: &str) -> Option<(&[u8], bool)>;
}

impl Headers for http::HeaderMap {
    fn lookup(&self, name: &str) -> Option<(&[u8], bool)> {
        // The names the core reads on every request, as `HeaderName`s: looked up by
        // `&str`, the map parses the name (lower-cases it, matches it against the
        // standard names) on every call.
        let mut values = match name {
            "idempotency-key" => self.get_all(IDEMPOTENCY_KEY),
            "content-type" => self.get_all(http::header::CONTENT_TYPE),
            "content-encoding" => self.get_all(http::header::CONTENT_ENCODING),
            "content-length" => self.get_all(http::header::CONTENT_LENGTH),
            _ => self.get_all(name),
        }
        .iter();
        let first = values.next()?;
        Some((first.as_bytes(), values.next().is_some()))
    }
}

impl<H: Headers + ?Sized> Headers for &H {
    fn lookup(&self, name: &str) -> Option<(&[u8], bool)> {
        (**self).lookup(name)
    }
}

/// A header value as text, under the rule `http`'s `HeaderValue::to_str` applies (tab
/// and visible ASCII only), so a value reads the same from either `http` version.
pub(crate) fn as_text(value: &[u8]) -> Option<&str> {
    // Every byte is tested, without stopping at the first bad one: the loop then has no
    // branch per byte and is compiled to a few wide comparisons. Values are short and
    // nearly always text, so stopping early would save nothing.
    let text = value.iter().fold(true, |text, &b| {
        text & ((b == b'\t') | (32..127).contains(&b))
    });
    if text {
        // Tab and visible ASCII are valid UTF-8; the check is the ASCII fast path.
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// The first value of `name` as text, if it is text.
pub(crate) fn first_text<'h>(headers: &'h (impl Headers + ?Sized), name: &str) -> Option<&'h str> {
    as_text(headers.lookup(name)?.0)
}
