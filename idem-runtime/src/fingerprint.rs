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

use actix_web::http::header::{CONTENT_TYPE, HeaderMap};
use sha2::{Digest, Sha256};

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
    reason: &'static str,
    offset: usize,
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
    /// use actix_web::http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
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
        headers: &HeaderMap,
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

fn body_kind(headers: &HeaderMap) -> BodyKind {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
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
fn is_json(headers: &HeaderMap) -> bool {
    body_kind(headers) == BodyKind::Json
}

/// `application/x-www-form-urlencoded` fields (a query string or a form body) in one
/// spelling: pieces split at `&` (empty ones dropped), name and value split at the first
/// `=`, both percent-decoded as actix's extractors decode them (`+` is a space, a `%`
/// without two hex digits stays as it is), stable-sorted by the decoded name, and written
/// back percent-encoded. Decoding keeps raw bytes, so two invalid UTF-8 spellings stay
/// apart even where an extractor would read both as U+FFFD.
fn canonical_fields(input: &[u8]) -> Vec<u8> {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = input
        .split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| match piece.iter().position(|&b| b == b'=') {
            Some(eq) => (
                percent_decode(&piece[..eq]),
                percent_decode(&piece[eq + 1..]),
            ),
            None => (percent_decode(piece), Vec::new()),
        })
        .collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(input.len());
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        percent_encode(name, &mut out);
        out.push(b'=');
        percent_encode(value, &mut out);
    }
    out
}

fn percent_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                input.get(i + 1).and_then(hex),
                input.get(i + 2).and_then(hex),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    out
}

fn hex(digit: &u8) -> Option<u8> {
    char::from(*digit).to_digit(16).map(|d| d as u8)
}

fn percent_encode(input: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in input {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

/// Where canonical JSON goes: straight into the hash at the top level, into an object's
/// buffer inside one.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// serde_json refuses a 128th level of nesting; so does the fingerprint, so that a body
/// the handler's `Json` extractor would read is never refused here, and the reverse.
const MAX_DEPTH: usize = 127;

/// A JSON reader (RFC 8259) over UTF-8 text that writes each value in canonical form as
/// it reads it. The canonical form is itself compact JSON: members sorted by their
/// canonical name, strings with only `"`, `\` and control characters escaped (as `\"`,
/// `\\` and `\u00XX`), numbers as `-`? digits `e` exponent with no leading or trailing
/// zero digit (zero is `0`).
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn document(mut self, out: &mut impl Sink) -> Result<(), InvalidJson> {
        self.value(out, 0)?;
        self.skip_whitespace();
        if self.pos < self.text.len() {
            return Err(self.error("trailing characters"));
        }
        Ok(())
    }

    fn error(&self, reason: &'static str) -> InvalidJson {
        InvalidJson {
            reason,
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.pos += usize::from(found);
        found
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), InvalidJson> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self, out: &mut impl Sink, depth: usize) -> Result<(), InvalidJson> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{' | b'[') if depth == MAX_DEPTH => {
                Err(self.error("nesting deeper than 127 levels"))
            }
            Some(b'{') => self.object(out, depth + 1),
            Some(b'[') => self.array(out, depth + 1),
            Some(b'"') => self.string(out),
            Some(b't') => self.literal(b"true", out),
            Some(b'f') => self.literal(b"false", out),
            Some(b'n') => self.literal(b"null", out),
            Some(b'-' | b'0'..=b'9') => self.number(out),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of the body")),
        }
    }

    fn literal(&mut self, word: &'static [u8], out: &mut impl Sink) -> Result<(), InvalidJson> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            out.put(word);
            Ok(())
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn array(&mut self, out: &mut impl Sink, depth: usize) -> Result<(), InvalidJson> {
        self.pos += 1;
        out.put(b"[");
        self.skip_whitespace();
        if !self.eat(b']') {
            loop {
                self.value(out, depth)?;
                self.skip_whitespace();
                if self.eat(b']') {
                    break;
                }
                self.expect(b',', "expected `,` or `]`")?;
                out.put(b",");
            }
        }
        out.put(b"]");
        Ok(())
    }

    fn object(&mut self, out: &mut impl Sink, depth: usize) -> Result<(), InvalidJson> {
        self.pos += 1;
        // The members' canonical bytes, one after another, and where each name and value
        // ends in them; offsets are u32 to keep the index small (a member list larger
        // than 4 GiB is refused below).
        let mut buffer = Vec::new();
        let mut members: Vec<[u32; 3]> = Vec::new();
        self.skip_whitespace();
        if !self.eat(b'}') {
            loop {
                self.skip_whitespace();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a member name"));
                }
                let start = buffer.len();
                self.string(&mut buffer)?;
                let name_end = buffer.len();
                self.skip_whitespace();
                self.expect(b':', "expected `:`")?;
                self.value(&mut buffer, depth)?;
                let offsets = [start, name_end, buffer.len()].map(u32::try_from);
                let [Ok(start), Ok(name_end), Ok(end)] = offsets else {
                    return Err(self.error("object larger than 4 GiB"));
                };
                members.push([start, name_end, end]);
                self.skip_whitespace();
                if self.eat(b'}') {
                    break;
                }
                self.expect(b',', "expected `,` or `}`")?;
            }
        }
        let slice = |from: u32, to: u32| &buffer[from as usize..to as usize];
        // Stable: members that share a name keep the order they were sent in.
        members.sort_by(|a, b| slice(a[0], a[1]).cmp(slice(b[0], b[1])));
        out.put(b"{");
        for (i, &[start, name_end, end]) in members.iter().enumerate() {
            if i > 0 {
                out.put(b",");
            }
            out.put(slice(start, name_end));
            out.put(b":");
            out.put(slice(name_end, end));
        }
        out.put(b"}");
        Ok(())
    }

    fn string(&mut self, out: &mut impl Sink) -> Result<(), InvalidJson> {
        self.pos += 1;
        out.put(b"\"");
        loop {
            let start = self.pos;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.pos += 1;
            }
            // The text is valid UTF-8 and a run ends only at ASCII, so each run is too.
            out.put(&self.text[start..self.pos]);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    out.put(b"\"");
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let decoded = self.escape()?;
                    write_char(decoded, out);
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    fn escape(&mut self) -> Result<char, InvalidJson> {
        let Some(byte) = self.peek() else {
            return Err(self.error("unterminated string"));
        };
        self.pos += 1;
        Ok(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => {
                self.pos -= 1;
                return Err(self.error("invalid escape"));
            }
        })
    }

    fn unicode_escape(&mut self) -> Result<char, InvalidJson> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !(self.eat(b'\\') && self.eat(b'u')) {
                    return Err(self.error("lone leading surrogate in a \\u escape"));
                }
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("lone leading surrogate in a \\u escape"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("lone trailing surrogate in a \\u escape")),
            code => code,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid \\u escape"))
    }

    fn hex4(&mut self) -> Result<u32, InvalidJson> {
        let digits = self.text.get(self.pos..self.pos + 4);
        let value = digits
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .and_then(|d| u32::from_str_radix(std::str::from_utf8(d).ok()?, 16).ok());
        match value {
            Some(value) => {
                self.pos += 4;
                Ok(value)
            }
            None => Err(self.error("invalid \\u escape")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Reads a number's parts as text and writes the exact decimal they spell: no float
    /// is ever made, so no two values share a form and no spelling of one value differs.
    fn number(&mut self, out: &mut impl Sink) -> Result<(), InvalidJson> {
        let negative = self.eat(b'-');
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("expected a digit")),
        }
        let int = &self.text[int_start..self.pos];
        let mut frac: &[u8] = &[];
        if self.eat(b'.') {
            let start = self.pos;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after `.`"));
            }
            frac = &self.text[start..self.pos];
        }
        let mut exponent: i64 = 0;
        if self.eat(b'e') || self.eat(b'E') {
            let negative_exponent = self.eat(b'-');
            if !negative_exponent {
                self.eat(b'+');
            }
            let start = self.pos;
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
            let text = &self.text[start..self.pos];
            let significant = &text[text.iter().take_while(|&&d| d == b'0').count()..];
            // 18 digits always fit an i64, with room for the shift below; beyond them the
            // number is 10^(10^18) or more, which no extractor reads.
            if significant.len() > 18 {
                return Err(InvalidJson {
                    reason: "number exponent out of range",
                    offset: start,
                });
            }
            exponent = significant
                .iter()
                .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
            if negative_exponent {
                exponent = -exponent;
            }
        }
        write_decimal(out, negative, int, frac, exponent);
        Ok(())
    }
}

/// Writes `±int.frac × 10^exponent` as its significant digits and the exponent of the last
/// one: `1.50` and `15e-1` are both `15e-1`; zero (signed or not) is `0`.
fn write_decimal(out: &mut impl Sink, negative: bool, int: &[u8], frac: &[u8], exponent: i64) {
    let n = int.len() + frac.len();
    let digit = |i: usize| {
        if i < int.len() {
            int[i]
        } else {
            frac[i - int.len()]
        }
    };
    let Some(first) = (0..n).find(|&i| digit(i) != b'0') else {
        out.put(b"0");
        return;
    };
    let last = (0..n).rev().find(|&i| digit(i) != b'0').unwrap_or(first);
    // Both lengths are bounded by the body's size, far from i64's range.
    let exponent = exponent - frac.len() as i64 + (n - 1 - last) as i64;
    if negative {
        out.put(b"-");
    }
    if first < int.len() {
        out.put(&int[first..int.len().min(last + 1)]);
    }
    if last >= int.len() {
        out.put(&frac[first.max(int.len()) - int.len()..=last - int.len()]);
    }
    out.put(b"e");
    out.put(exponent.to_string().as_bytes());
}

fn write_char(c: char, out: &mut impl Sink) {
    match c {
        '"' => out.put(b"\\\""),
        '\\' => out.put(b"\\\\"),
        c if u32::from(c) < 0x20 => out.put(format!("\\u{:04x}", u32::from(c)).as_bytes()),
        c => out.put(c.encode_utf8(&mut [0; 4]).as_bytes()),
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
}
