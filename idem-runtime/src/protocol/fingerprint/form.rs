//! Form fields and query strings in one spelling.

/// `application/x-www-form-urlencoded` fields (a query string or a form body) in one
/// spelling: pieces split at `&` (empty ones dropped), name and value split at the first
/// `=`, both percent-decoded as actix's extractors decode them (`+` is a space, a `%`
/// without two hex digits stays as it is), stable-sorted by the decoded name, and written
/// back percent-encoded. Decoding keeps raw bytes, so two invalid UTF-8 spellings stay
/// apart even where an extractor would read both as U+FFFD.
pub(super) fn canonical_fields(input: &[u8]) -> Vec<u8> {
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
