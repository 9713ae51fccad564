//! How the core reads request headers, whatever `http` version the framework uses.

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
        let mut values = self.get_all(name).iter();
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
    if value.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// The first value of `name` as text, if it is text.
pub(crate) fn first_text<'h>(headers: &'h (impl Headers + ?Sized), name: &str) -> Option<&'h str> {
    as_text(headers.lookup(name)?.0)
}
