//! JSON in canonical form, written into the hash as it is read.

use sha2::{Digest, Sha256};

use super::InvalidJson;

/// Where canonical JSON goes: straight into the hash at the top level, into an object's
/// buffer inside one.
pub(super) trait Sink {
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
pub(super) struct Parser<'a> {
    pub(super) text: &'a [u8],
    pub(super) pos: usize,
}

impl Parser<'_> {
    pub(super) fn document(mut self, out: &mut impl Sink) -> Result<(), InvalidJson> {
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
        // Sized for a small object up front: growing from empty reallocated it four or
        // five times for a typical body. The rest of the text bounds what it can use
        // (near enough: an escape may change a string's length), and a small cap keeps a
        // deeply nested body from reserving much per level.
        let mut buffer = Vec::with_capacity(self.text.len().saturating_sub(self.pos).min(256));
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
