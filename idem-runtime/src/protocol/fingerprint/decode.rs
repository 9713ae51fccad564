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

use bytes::{Buf as _, Bytes};

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

    /// The content the fingerprint covers: `body` decoded (see [`content_off_thread`]),
    /// or the answer to a body that cannot be decoded within the limit.
    pub(crate) async fn content(
        self,
        headers: &(impl Headers + ?Sized),
        body: &Bytes,
    ) -> Result<Bytes, Problem> {
        let content = content_off_thread(headers, body, self.0).await;
        content.map_err(|error| match error {
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
#[cfg(test)]
pub(crate) fn content(
    headers: &(impl Headers + ?Sized),
    body: &Bytes,
    limit: usize,
) -> Result<Bytes, DecodeError> {
    let Some(encoding) = Encoding::of(headers) else {
        return Ok(body.clone());
    };
    let decoder = decoder(encoding, body.clone(), limit)?;
    finish(encoding, read_bounded(decoder, Vec::new(), limit))
}

/// The first bytes of content decoded on the request's own task: enough for any body an
/// API sends (decoding them costs microseconds), and all a small stream holds.
const INLINE: usize = 64 * 1024;

/// [`content`] without holding the async worker for long: the first [`INLINE`] bytes are
/// decoded in place, and a stream that inflates past them is decoded to the end on a
/// blocking thread. This runs before the handler's extractors, so before authentication:
/// a compressed body of 81 bytes can inflate to the whole limit, which costs a quarter of
/// a millisecond of CPU per 2 MiB (measured; see the guide's limits), and no request may
/// hold a worker, and the other requests on it, that long.
pub(crate) async fn content_off_thread(
    headers: &(impl Headers + ?Sized),
    body: &Bytes,
    limit: usize,
) -> Result<Bytes, DecodeError> {
    let Some(encoding) = Encoding::of(headers) else {
        return Ok(body.clone());
    };
    let mut decoder = decoder(encoding, body.clone(), limit)?;
    let mut first = Vec::new();
    let inline = u64::try_from(INLINE.min(limit)).unwrap_or(u64::MAX);
    if let Err(error) = (&mut decoder).take(inline).read_to_end(&mut first) {
        return finish(encoding, Err(error));
    }
    if first.len() < INLINE.min(limit) {
        // The stream ended within the first bytes.
        return finish(encoding, Ok(Some(first)));
    }
    let rest = tokio::task::spawn_blocking(move || read_bounded(decoder, first, limit)).await;
    // A panic in a decoder is resumed here, as it would have been had it decoded in place.
    let rest = rest.unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()));
    finish(encoding, rest)
}

/// A reader of `body`'s content; the window a zstd or brotli stream declares is checked
/// against what `limit` needs first.
fn decoder(
    encoding: Encoding,
    body: Bytes,
    limit: usize,
) -> Result<Box<dyn Read + Send>, DecodeError> {
    let invalid = |error| DecodeError::Invalid {
        encoding: encoding.name(),
        error,
    };
    Ok(match encoding {
        // Every member (RFC 1952, 2.2), as `gzip -d` and the handler's extractors read them.
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(body.reader())),
        // HTTP's `deflate` is the zlib format (RFC 9110, 8.4.1.2), as actix reads it.
        Encoding::Deflate => Box::new(flate2::read::ZlibDecoder::new(body.reader())),
        Encoding::Brotli => {
            // The decoder allocates the window the stream declares (up to 16 MiB) before
            // it has produced a byte; a window past both 4 MiB and the limit is refused.
            let most = brotli_window_bits_for(limit);
            match brotli_window_bits(&body) {
                Some(bits) if bits <= most => {}
                declared => return Err(invalid(brotli_window_too_large(declared, most))),
            }
            Box::new(brotli_decompressor::Decompressor::new(body.reader(), 8192))
        }
        Encoding::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(body.reader()).map_err(invalid)?;
            // zstd's decoder allocates the window a frame declares, up to 128 MiB by
            // default; a window past both 8 MiB and the limit is refused instead.
            decoder
                .window_log_max(window_log_for(limit))
                .map_err(invalid)?;
            Box::new(decoder)
        }
    })
}

/// The decoded content, or why there is none.
fn finish(encoding: Encoding, decoded: io::Result<Option<Vec<u8>>>) -> Result<Bytes, DecodeError> {
    match decoded {
        Ok(Some(content)) => Ok(Bytes::from(content)),
        Ok(None) => Err(DecodeError::TooLarge),
        Err(error) => Err(DecodeError::Invalid {
            encoding: encoding.name(),
            error,
        }),
    }
}

/// The smallest zstd window log that holds `limit` bytes, between 23 (8 MiB, what zstd's
/// own levels up to 19 use) and 27 (zstd's default maximum).
fn window_log_for(limit: usize) -> u32 {
    let needed = usize::BITS - limit.saturating_sub(1).leading_zeros();
    needed.clamp(23, 27)
}

/// The largest brotli window, in bits, a body of at most `limit` bytes is let declare:
/// what holds `limit`, between 22 (4 MiB, the reference encoder's default) and 24 (16 MiB,
/// the most RFC 7932 allows).
fn brotli_window_bits_for(limit: usize) -> u32 {
    // A window of `bits` holds (1 << bits) - 16 bytes (RFC 7932, 9.1).
    let needed = usize::BITS - limit.saturating_add(15).leading_zeros();
    needed.clamp(22, 24)
}

/// The window a brotli stream declares in its first bits (WBITS, RFC 7932, 9.1), read
/// least significant bit first; `None` for an empty body or the large-window extension,
/// which a standard decoder refuses too.
fn brotli_window_bits(stream: &[u8]) -> Option<u32> {
    let bits = u32::from(*stream.first()?) | u32::from(stream.get(1).copied().unwrap_or(0)) << 8;
    if bits & 1 == 0 {
        return Some(16);
    }
    match (bits >> 1) & 0b111 {
        0 => match (bits >> 4) & 0b111 {
            0 => Some(17),
            1 => None,
            m => Some(8 + m),
        },
        n => Some(17 + n),
    }
}

fn brotli_window_too_large(declared: Option<u32>, most: u32) -> io::Error {
    let most = (1_usize << most) - 16;
    io::Error::other(match declared {
        Some(bits) => format!(
            "the stream declares a window of {} bytes; this endpoint decodes windows of at \
             most {most} bytes (compress with a smaller window, e.g. brotli's default lgwin 22)",
            (1_usize << bits) - 16
        ),
        None => format!("the stream declares no standard window (at most {most} bytes)"),
    })
}

/// Reads the rest of `reader` after `out`, or `None` as soon as the whole is more than
/// `limit` bytes: a stream that inflates past the limit is never held in memory beyond it.
fn read_bounded(reader: impl Read, mut out: Vec<u8>, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let cap = u64::try_from(limit.saturating_sub(out.len()))
        .unwrap_or(u64::MAX)
        .saturating_add(1);
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

    /// An empty brotli stream declaring the window `header`'s bits name: WBITS, then
    /// ISLAST and ISLASTEMPTY set (RFC 7932, 9.1 and 9.2).
    fn empty_brotli(wbits_code: u8, wbits_len: u32) -> Bytes {
        Bytes::from(vec![wbits_code | 0b11 << wbits_len])
    }

    #[test]
    fn brotli_windows_past_what_the_limit_needs_are_refused_before_decoding() {
        // WBITS 16: "0"; 22: "1" then 5; 24: "1" then 7; 10: "1", 0, then 2.
        let (w16, w22, w24, w10) = (
            empty_brotli(0b0, 1),
            empty_brotli(0b1011, 4),
            empty_brotli(0b1111, 4),
            Bytes::from(vec![0b010_0001, 0b1]),
        );
        assert_eq!(brotli_window_bits(&w16), Some(16));
        assert_eq!(brotli_window_bits(&w22), Some(22));
        assert_eq!(brotli_window_bits(&w24), Some(24));
        assert_eq!(brotli_window_bits(&w10), Some(10));
        assert_eq!(brotli_window_bits(&[0b001_0001]), None, "large window");
        for small in [w16, w22.clone()] {
            assert_eq!(content(&headers("br"), &small, 1024).unwrap().len(), 0);
        }
        let refused = content(&headers("br"), &w24, 1024).unwrap_err();
        let DecodeError::Invalid { encoding, error } = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(encoding, "br");
        assert!(error.to_string().contains("16777200 bytes"), "{error}");
        // A limit that needs the window allows it.
        assert_eq!(content(&headers("br"), &w24, 10 << 20).unwrap().len(), 0);
        assert_eq!(brotli_window_bits_for(1024), 22);
        assert_eq!(brotli_window_bits_for((8 << 20) - 16), 23);
        assert_eq!(brotli_window_bits_for((8 << 20) - 15), 24);
        assert_eq!(brotli_window_bits_for(usize::MAX), 24);
    }

    /// The same content decoded in place and, past the first bytes, on a blocking
    /// thread; the limit holds on the whole.
    #[tokio::test]
    async fn a_stream_past_the_first_bytes_decodes_the_same_off_the_task() {
        let plain: Vec<u8> = (0..(3 * INLINE)).map(|i| (i % 251) as u8).collect();
        let body = gzip(&plain);
        let decoded = content_off_thread(&headers("gzip"), &body, plain.len()).await;
        assert_eq!(&decoded.unwrap()[..], &plain[..]);
        let short = content_off_thread(&headers("gzip"), &gzip(b"hello"), 100).await;
        assert_eq!(&short.unwrap()[..], b"hello");
        for limit in [plain.len() - 1, INLINE - 1, INLINE, INLINE + 1] {
            let refused = content_off_thread(&headers("gzip"), &body, limit).await;
            assert!(matches!(refused, Err(DecodeError::TooLarge)), "{limit}");
        }
        let mut cut = body.to_vec();
        cut.truncate(cut.len() - 8);
        let cut = content_off_thread(&headers("gzip"), &Bytes::from(cut), plain.len()).await;
        assert!(matches!(cut, Err(DecodeError::Invalid { .. })), "{cut:?}");
    }

    #[test]
    fn zstd_windows_cover_the_limit() {
        assert_eq!(window_log_for(2 << 20), 23);
        assert_eq!(window_log_for(16 << 20), 24);
        assert_eq!(window_log_for((16 << 20) + 1), 25);
        assert_eq!(window_log_for(usize::MAX), 27);
    }
}
