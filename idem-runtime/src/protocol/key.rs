//! The `Idempotency-Key` request header.

use std::fmt;

use super::headers::{Headers, IDEMPOTENCY_KEY, as_text};

/// The longest key accepted, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key: 1 to 255 visible ASCII characters.
///
/// Both forms a client may send denote the same key: the bare value
/// (`Idempotency-Key: 8e03978e-40d5`) and the Structured Field string the IETF
/// draft specifies (`Idempotency-Key: "8e03978e-40d5"`).
///
/// ```
/// use idem_runtime::IdempotencyKey;
///
/// let bare = IdempotencyKey::parse("8e03978e-40d5").unwrap();
/// let quoted = IdempotencyKey::parse("\"8e03978e-40d5\"").unwrap();
/// assert_eq!(bare, quoted);
/// assert_eq!(bare.as_str(), "8e03978e-40d5");
/// assert!(IdempotencyKey::parse("").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not a usable key; the message is shown to the client.
///
/// ```
/// use idem_runtime::{IdempotencyKey, KeyError};
///
/// assert_eq!(IdempotencyKey::parse("\"unterminated"), Err(KeyError::MalformedQuoted));
/// assert_eq!(IdempotencyKey::parse(&"k".repeat(300)), Err(KeyError::TooLong(300)));
/// let message = KeyError::TooLong(300).to_string();
/// assert!(message.contains("at most 255"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The request has no `Idempotency-Key` header.
    Missing,
    /// The header appears more than once.
    Repeated,
    /// The value is empty (or an empty quoted string).
    Empty,
    /// The key has more than [`MAX_KEY_LEN`] characters.
    TooLong(usize),
    /// A byte outside visible ASCII (`!` to `~`), at this position of the key.
    InvalidChar(usize),
    /// A quoted value that is not a well-formed Structured Field string.
    MalformedQuoted,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str(
                "this endpoint requires an Idempotency-Key header: send a unique value \
                 (a UUID is a good choice) and reuse it on every retry of the same operation",
            ),
            Self::Repeated => f.write_str("the Idempotency-Key header must appear exactly once"),
            Self::Empty => f.write_str("the Idempotency-Key header must not be empty"),
            Self::TooLong(len) => write!(
                f,
                "the Idempotency-Key is {len} characters long; at most {MAX_KEY_LEN} are allowed"
            ),
            Self::InvalidChar(at) => write!(
                f,
                "the Idempotency-Key may contain only visible ASCII characters ('!' to '~'); \
                 character {} is not one",
                at + 1
            ),
            Self::MalformedQuoted => f.write_str(
                "a quoted Idempotency-Key must be a Structured Field string: one pair of \
                 double quotes with only \\\" and \\\\ escaped inside, and no parameters",
            ),
        }
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// Parses one header value, in bare or quoted form.
    ///
    /// Surrounding spaces and tabs are ignored, as HTTP specifies for field values.
    pub fn parse(value: &str) -> Result<Self, KeyError> {
        let value = value.trim_matches([' ', '\t']);
        let key = match value.strip_prefix('"') {
            Some(rest) => unquote(rest)?,
            None => value.to_owned(),
        };
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some(at) = key.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(KeyError::InvalidChar(at));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong(key.len()));
        }
        Ok(Self(key))
    }

    /// A webhook event's id as the key, exactly as the sender wrote it: no spaces trimmed
    /// and no quotes removed. A `webhook-id` header is no Structured Field string and a
    /// JSON string is already decoded, so `"x"` (in quotes) is an id of its own, not
    /// another spelling of `x`; and an id with a space is refused rather than trimmed
    /// into another event's id.
    pub(crate) fn exact(value: &str) -> Result<Self, KeyError> {
        if value.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some(at) = value.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(KeyError::InvalidChar(at));
        }
        if value.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong(value.len()));
        }
        Ok(Self(value.to_owned()))
    }

    /// Reads the key from request headers: exactly one `Idempotency-Key` header.
    ///
    /// ```
    /// use http::{HeaderMap, HeaderValue};
    /// use idem_runtime::{IDEMPOTENCY_KEY, IdempotencyKey, KeyError};
    ///
    /// let mut headers = HeaderMap::new();
    /// assert_eq!(IdempotencyKey::from_headers(&headers), Err(KeyError::Missing));
    /// headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("order-42"));
    /// assert_eq!(IdempotencyKey::from_headers(&headers).unwrap().as_str(), "order-42");
    /// headers.append(IDEMPOTENCY_KEY, HeaderValue::from_static("order-43"));
    /// assert_eq!(IdempotencyKey::from_headers(&headers), Err(KeyError::Repeated));
    /// ```
    pub fn from_headers(headers: &(impl Headers + ?Sized)) -> Result<Self, KeyError> {
        let (value, repeated) = headers
            .lookup(IDEMPOTENCY_KEY.as_str())
            .ok_or(KeyError::Missing)?;
        if repeated {
            return Err(KeyError::Repeated);
        }
        match as_text(value) {
            Some(text) => Self::parse(text),
            // Non-ASCII bytes are not text; report where, like any other bad character.
            None => {
                let at = value.iter().position(|b| !b.is_ascii()).unwrap_or(0);
                Err(KeyError::InvalidChar(at))
            }
        }
    }

    /// The key as the client meant it (quotes and escapes removed).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Decodes the rest of an sf-string after its opening quote (RFC 8941, section 3.3.3).
fn unquote(rest: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('"' | '\\')) => out.push(escaped),
                _ => return Err(KeyError::MalformedQuoted),
            },
            // The closing quote must end the value: parameters (`"k";a=1`) are not accepted.
            '"' if chars.as_str().is_empty() => return Ok(out),
            '"' => return Err(KeyError::MalformedQuoted),
            c => out.push(c),
        }
    }
    Err(KeyError::MalformedQuoted)
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_quoted_forms_are_the_same_key() {
        let bare = IdempotencyKey::parse("abc-123").unwrap();
        assert_eq!(IdempotencyKey::parse("\"abc-123\"").unwrap(), bare);
        assert_eq!(IdempotencyKey::parse("  abc-123\t").unwrap(), bare);
    }

    #[test]
    fn quoted_escapes_are_decoded() {
        let key = IdempotencyKey::parse(r#""a\"b\\c""#).unwrap();
        assert_eq!(key.as_str(), r#"a"b\c"#);
    }

    #[test]
    fn bare_keys_may_hold_quotes_and_backslashes() {
        assert_eq!(
            IdempotencyKey::parse(r#"a"b\c"#).unwrap().as_str(),
            r#"a"b\c"#
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(IdempotencyKey::parse("\"\""), Err(KeyError::Empty));
        assert_eq!(IdempotencyKey::parse("a b"), Err(KeyError::InvalidChar(1)));
        assert_eq!(
            IdempotencyKey::parse("\"a b\""),
            Err(KeyError::InvalidChar(1))
        );
        assert_eq!(IdempotencyKey::parse("é"), Err(KeyError::InvalidChar(0)));
        assert_eq!(
            IdempotencyKey::parse("\"abc"),
            Err(KeyError::MalformedQuoted)
        );
        assert_eq!(
            IdempotencyKey::parse("\"a\"b\""),
            Err(KeyError::MalformedQuoted)
        );
        assert_eq!(
            IdempotencyKey::parse("\"a\";p=1"),
            Err(KeyError::MalformedQuoted)
        );
        assert_eq!(
            IdempotencyKey::parse(r#""a\n""#),
            Err(KeyError::MalformedQuoted)
        );
    }

    #[test]
    fn length_limit_is_255_characters() {
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(KeyError::TooLong(256))
        );
        let quoted = format!("\"{}\"", "k".repeat(255));
        assert!(IdempotencyKey::parse(&quoted).is_ok());
    }
}

/// Where a webhook handler's key (the event's id) comes from, as `#[idempotent(key = ..)]`
/// names it. Without one, the key is the `Idempotency-Key` header.
///
/// ```
/// use idem_runtime::{KeySource, Policy};
///
/// static POLICY: Policy = Policy::new("receive", "shop::webhooks", "sender", 259_200)
///     .with_key(KeySource::Header("webhook-id"));
/// assert_eq!(POLICY.key_source(), Some(KeySource::Header("webhook-id")));
/// assert_eq!(KeySource::Json("id").to_string(), "the body's JSON field `id`");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// A request header, by its name in lowercase: `webhook-id`, `x-github-delivery`.
    Header(&'static str),
    /// A field of the JSON body: a top-level member's name (`id`), or a JSON Pointer
    /// (RFC 6901) when it starts with `/` (`/data/id`). A string or an integer.
    Json(&'static str),
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "the `{name}` header"),
            Self::Json(field) => write!(f, "the body's JSON field `{field}`"),
        }
    }
}
