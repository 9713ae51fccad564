//! A request body's content, decoded from its `Content-Encoding` as actix-web's
//! extractors decode it, with the request limit applied to the decoded size.
//!
//! actix-web (with its default `compress-*` features) decodes `gzip`, `deflate`, `br` and
//! `zstd` bodies inside each body extractor, from the header, and passes any other
//! encoding through untouched. The fingerprint must cover what the extractors read, so
//! the same body sent compressed and plain is one request. idem decodes here, once per
//! request and before any extractor runs, for two reasons: actix decodes a whole buffered
//! chunk at once, so a small compressed body that inflates to gigabytes (a "zip bomb")
//! would exhaust memory inside the extractor; and a stream that does not decode is best
//! refused before the claim, with one clear answer. The extractors still get the body as
//! sent and decode it themselves (the request keeps its `Content-Encoding`, which the
//! runtime cannot remove), so they decode it once, as always, and within the limit
//! checked here.

use std::io::{self, Read};

use bytes::Bytes;

use crate::protocol::headers::{Headers, first_text};
use crate::protocol::problem::{Problem, ProblemKind};

/// Why a body's content cannot be had.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// The decoded content is larger than the limit.
    TooLarge,
    /// The body is not a valid stream of its encoding.
    Invalid {
        encoding: &'static str,
        error: io::Error,
    },
}

/// The encodings actix-web decodes, named as `Content-Encoding` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Gzip,
    Deflate,
    Brotli,
    Zstd,
}

impl Encoding {
    /// Parsed as actix-http parses the header: the whole value, trimmed, without regard
    /// to case. A list (`gzip, br`) or an unknown coding is passed through by actix, so
    /// it is fingerprinted as the bytes sent.
    fn of(headers: &(impl Headers + ?Sized)) -> Option<Self> {
        let value = first_text(headers, "content-encoding")?.trim();
        [
            ("gzip", Self::Gzip),
            ("deflate", Self::Deflate),
            ("br", Self::Brotli),
            ("zstd", Self::Zstd),
        ]
        .into_iter()
        .find(|(name, _)| value.eq_ignore_ascii_case(name))
        .map(|(_, encoding)| encoding)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
            Self::Brotli => "br",
            Self::Zstd => "zstd",
        }
    }
}

/// Whether [`content`] decodes a body sent with these headers (an adapter whose framework
/// does not decode, axum's, then hands its extractors the content without the header).
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn decodes(headers: &(impl Headers + ?Sized)) -> bool {
    Encoding::of(headers).is_some()
}

/// The request limit as every adapter applies it, with the protocol's answers: 413 for a
/// body past it (declared, read or decoded), 400 for a body that does not decode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimit(pub(crate) usize);

impl BodyLimit {
    /// The 413 for a body past the limit.
    pub(crate) fn too_large(self) -> Problem {
        ProblemKind::BodyTooLarge.problem(format!(
            "the request body is larger than the {} bytes this endpoint accepts",
            self.0
        ))
    }

    /// Refuses a declared oversize body before a byte of it is read.
    pub(crate) fn check_declared(self, headers: &(impl Headers + ?Sized)) -> Result<(), Problem> {
        let declared: Option<usize> =
            first_text(headers, "content-length").and_then(|len| len.parse().ok());
        match declared {
            Some(len) if len > self.0 => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    /// The content the fingerprint covers: `body` decoded (see [`content`]), or the answer
    /// to a body that cannot be decoded within the limit.
    pub(crate) fn content(
        self,
        headers: &(impl Headers + ?Sized),
        body: &Bytes,
    ) -> Result<Bytes, Problem> {
        content(headers, body, self.0).map_err(|error| match error {
            DecodeError::TooLarge => self.too_large(),
            DecodeError::Invalid { encoding, error } => {
                ProblemKind::EncodingInvalid.problem(format!(
                    "the request body is not valid `{encoding}` data, as its Content-Encoding \
                     says: {error}"
                ))
            }
        })
    }
}

/// The content of `body` as the extractors will read it, at most `limit` bytes. A body
/// without an encoding actix decodes is its own content (no copy).
pub(crate) fn content(
    headers: &(impl Headers + ?Sized),
    body: &Bytes,
    limit: usize,
) -> Result<Bytes, DecodeError> {
    let Some(encoding) = Encoding::of(headers) else {
        return Ok(body.clone());
    };
    let invalid = |error| DecodeError::Invalid {
        encoding: encoding.name(),
        error,
    };
    let input: &[u8] = body;
    let decoded = match encoding {
        // Every member (RFC 1952, 2.2), as `gzip -d` and the handler's extractors read them.
        Encoding::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit),
        // HTTP's `deflate` is the zlib format (RFC 9110, 8.4.1.2), as actix reads it.
        Encoding::Deflate => read_bounded(flate2::read::ZlibDecoder::new(input), limit),
        Encoding::Brotli => {
            read_bounded(brotli_decompressor::Decompressor::new(input, 8192), limit)
        }
        Encoding::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(invalid)?;
            // zstd's decoder allocates the window a frame declares, up to 128 MiB by
            // default; a window past both 8 MiB and the limit is refused instead.
            decoder
                .window_log_max(window_log_for(limit))
                .map_err(invalid)?;
            read_bounded(decoder, limit)
        }
    };
    match decoded {
        Ok(Some(content)) => Ok(Bytes::from(content)),
        Ok(None) => Err(DecodeError::TooLarge),
        Err(error) => Err(invalid(error)),
    }
}

/// The smallest zstd window log that holds `limit` bytes, between 23 (8 MiB, what zstd's
/// own levels up to 19 use) and 27 (zstd's default maximum).
fn window_log_for(limit: usize) -> u32 {
    let needed = usize::BITS - limit.saturating_sub(1).leading_zeros();
    needed.clamp(23, 27)
}

/// Reads all of `reader`, or `None` as soon as it yields more than `limit` bytes: a
/// stream that inflates past the limit is never held in memory beyond it.
fn read_bounded(reader: impl Read, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out)?;
    Ok((out.len() <= limit).then_some(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use http::header::{CONTENT_ENCODING, HeaderMap, HeaderValue};

    use super::*;

    fn headers(encoding: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_str(encoding).unwrap());
        headers
    }

    fn gzip(plain: &[u8]) -> Bytes {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(plain).unwrap();
        Bytes::from(encoder.finish().unwrap())
    }

    #[test]
    fn a_body_of_several_gzip_members_is_decoded_whole() {
        // RFC 1952, 2.2: a gzip stream is a series of members, each compressed on its own
        // (what `cat a.gz b.gz` makes); `gzip -d` and the handler's extractors read them
        // all, so the fingerprint must too, or two bodies differing after the first
        // member would be "the same payload".
        let mut body = gzip(b"hel").to_vec();
        body.extend_from_slice(&gzip(b"lo"));
        let body = Bytes::from(body);
        assert_eq!(
            &content(&headers("gzip"), &body, 100).unwrap()[..],
            b"hello"
        );
        let mut other = gzip(b"hel").to_vec();
        other.extend_from_slice(&gzip(b"p!"));
        assert_eq!(
            &content(&headers("gzip"), &Bytes::from(other), 100).unwrap()[..],
            b"help!"
        );
        // The limit holds across members.
        assert!(content(&headers("gzip"), &body, 4).is_err());
    }

    #[test]
    fn the_header_is_read_as_actix_reads_it() {
        let body = gzip(b"hello");
        for value in ["gzip", " GZip ", "gzip\t"] {
            assert_eq!(
                &content(&headers(value), &body, 100).unwrap()[..],
                b"hello",
                "{value:?}"
            );
        }
        // Lists and unknown codings are passed through by actix, so they count as sent.
        for value in ["gzip, identity", "compress", "identity", ""] {
            assert_eq!(
                content(&headers(value), &body, 100).unwrap(),
                body,
                "{value:?}"
            );
        }
        assert_eq!(content(&HeaderMap::new(), &body, 100).unwrap(), body);
    }

    #[test]
    fn the_limit_is_on_the_decoded_size() {
        let body = gzip(&[b' '; 1000]);
        assert_eq!(content(&headers("gzip"), &body, 1000).unwrap().len(), 1000);
        assert!(matches!(
            content(&headers("gzip"), &body, 999),
            Err(DecodeError::TooLarge)
        ));
    }

    #[test]
    fn zstd_windows_cover_the_limit() {
        assert_eq!(window_log_for(2 << 20), 23);
        assert_eq!(window_log_for(16 << 20), 24);
        assert_eq!(window_log_for((16 << 20) + 1), 25);
        assert_eq!(window_log_for(usize::MAX), 27);
    }
}
