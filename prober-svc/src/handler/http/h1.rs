//! The HTTP/1.1 exchange of a probe, written and read here rather than through hyper's client.
//!
//! Why not hyper: a probe's exchange is the narrowest case HTTP/1 has — one GET without a body
//! on a fresh connection with `Connection: close`, then a status, one `Location` and at most
//! 10 KiB of body. hyper's client is a general connection state machine (a dispatcher and a
//! request channel, a `HeaderMap` built for the request and another for the response, shared
//! buffers, a body channel polled frame by frame); for this one exchange it was about half of the
//! prober's user time per HTTP probe. What remains here is a byte buffer written once and a read
//! loop.
//!
//! What is kept of hyper is its behaviour, check by check: the head is parsed by `httparse`
//! (hyper's own parser, with hyper's default configuration) after `head::Scan` applied Go's limits
//! (as it did in front of hyper), the response's framing follows hyper's `Client::decoder`
//! (101/204/304 without body, `Transfer-Encoding` before `Content-Length`, hyper's list rules for
//! both, `Transfer-Encoding` refused on HTTP/1.0, close-delimited otherwise), the chunked decoder
//! has hyper's states and limits, and every error has the text hyper's error had here. The
//! request is hyper's bytes: its title-cased names in `HeaderMap` order. `h1/tests.rs` runs both
//! on the same bytes and compares.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::head::{HeadTooLarge, Scan};
use crate::handler::go_text::go_errno;
use crate::model::outcome::MAX_OUTPUT_BYTES;

mod chunked;
mod spare;

use self::chunked::Chunked;
use self::spare::READ_CHUNK;
pub(crate) use self::spare::Spare;

/// hyper's `h1_max_headers` default: more fields than this in the (filtered) head is "too large".
const MAX_FIELDS: usize = 100;

/// The kept head's first capacity: a usual probe answer's status line and kept fields.
const HEAD_ROOM: usize = 256;

/// Why the exchange failed before a response head; `Display` is what hyper's error read as here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1Error {
    /// The connection closed before a complete response head (hyper's incomplete message).
    #[error("EOF")]
    Eof,
    /// The head is not HTTP/1 as hyper parses it.
    #[error("net/http: HTTP/1.x transport connection broken: malformed HTTP response ({0})")]
    Malformed(&'static str),
    /// The heads passed Go's limit.
    #[error(transparent)]
    TooLarge(#[from] HeadTooLarge),
    /// The socket failed.
    #[error("read: {}", go_errno(.0))]
    Io(io::Error),
}

/// Why the body could not be read; `Display` is what hyper's body error read as here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1BodyError {
    /// The connection closed before the framing said the body ended.
    #[error("read: end of file before message length reached")]
    Incomplete,
    /// The chunked framing is broken.
    #[error("read: {0}")]
    Chunked(&'static str),
    /// The socket failed.
    #[error("read: {}", go_errno(.0))]
    Io(io::Error),
}

/// The status line and `Location` of the final response.
#[derive(Debug, Clone)]
pub(crate) struct H1Head {
    pub(crate) status: u16,
    /// First `Location` value.
    pub(crate) location: Option<String>,
}

/// How the body ends (hyper's `DecodedLength`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// Sends `request` (already serialised) on `io` and reads the response: the head, also stored in
/// `head` as soon as it is parsed (so that a deadline during the body can say how far it got),
/// and at most [`MAX_OUTPUT_BYTES`] of body.
pub(crate) async fn exchange<S>(
    io: &mut S,
    mut buf: Spare,
    head: &mut Option<H1Head>,
) -> Result<(H1Head, Result<Vec<u8>, H1BodyError>), H1Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(&buf).await.map_err(H1Error::Io)?;
    // The request's buffer becomes the read buffer.
    buf.clear();
    buf.reserve(READ_CHUNK);
    let mut scan = Scan::new();
    // What hyper would have been handed: the heads as `Scan` filters them, then the body.
    // Room for a usual head at once (it grows for a larger one).
    let mut filtered: Vec<u8> = Vec::with_capacity(HEAD_ROOM);
    // How much of `filtered` was checked line by line.
    let mut checked = 0;
    let (parsed, framing) = loop {
        buf.clear();
        let n = io.read_buf(&mut *buf).await.map_err(H1Error::Io)?;
        let before = filtered.len();
        if n == 0 {
            scan.end_of_stream(&mut filtered);
            // hyper parses what it got before it sees the end: a malformed prefix is malformed.
            if !filtered.is_empty() {
                parse_head(&filtered)?;
            }
            return Err(H1Error::Eof);
        }
        scan.feed(&buf, &mut filtered)?;
        if filtered.len() == before {
            continue;
        }
        if !scan.head_done() {
            // Only whole lines were added: each is checked once, as it arrives, so a malformed
            // head fails as soon as hyper's incremental parse would fail it.
            check_lines(&filtered, checked)?;
            checked = filtered.len();
            continue;
        }
        // The whole head is here: one parse of it. `Scan` ended it at its blank line after a
        // final status line, so the parser finds it complete; were it not, reading on would
        // parse it again on every read, so it is refused instead.
        match parse_head(&filtered)? {
            Some(done) => break done,
            None => return Err(H1Error::Malformed("message head is too large")),
        }
    };
    let parsed_head = H1Head {
        status: parsed.status,
        location: parsed.location,
    };
    *head = Some(parsed_head.clone());
    let rest = filtered.split_off(parsed.len);
    Ok((parsed_head, read_body(io, buf, rest, framing).await))
}

/// A complete final head.
struct Parsed {
    /// Bytes of the head in the filtered stream.
    len: usize,
    status: u16,
    location: Option<String>,
}

/// Checks the whole lines `filtered[from..]` of a head not yet complete with hyper's parser:
/// the status line when `from` is 0, field lines after it. Each line is checked once, so a head
/// costs one pass here however it arrives (a parse of everything so far on every read would
/// examine a long status line once per later line).
fn check_lines(filtered: &[u8], from: usize) -> Result<(), H1Error> {
    count_examined(filtered.len() - from);
    let checked = if from == 0 {
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        httparse::Response::new(&mut fields)
            .parse(filtered)
            .map(|_| ())
    } else {
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        httparse::parse_headers(&filtered[from..], &mut fields).map(|_| ())
    };
    checked.map_err(|e| H1Error::Malformed(parse_error_text(e)))
}

/// hyper's `Client::parse` over the filtered bytes: `None` while the head is incomplete.
fn parse_head(filtered: &[u8]) -> Result<Option<(Parsed, Framing)>, H1Error> {
    count_examined(filtered.len());
    let mut offset = 0;
    // hyper skips interim responses itself too (`Scan` already dropped the ones it recognises).
    loop {
        let bytes = &filtered[offset..];
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut res = httparse::Response::new(&mut fields);
        let len = match res.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(H1Error::Malformed(parse_error_text(e))),
        };
        let code = res.code.unwrap_or(0);
        if !(100..=999).contains(&code) {
            return Err(H1Error::Malformed("invalid HTTP status-code parsed"));
        }
        let http10 = res.version != Some(1);
        let mut location = None;
        let mut content_length: Option<Option<u64>> = None;
        let mut te_last: Option<&[u8]> = None;
        for f in res.headers.iter() {
            let name = f.name.as_bytes();
            if name.eq_ignore_ascii_case(b"location") {
                if location.is_none() {
                    location = Some(String::from_utf8_lossy(f.value).into_owned());
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                te_last = Some(f.value);
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let prev = content_length.unwrap_or(None);
                let first = content_length.is_none();
                content_length = Some(content_length_values(f.value, first, prev));
            }
        }
        let framing = match code {
            101 | 204 | 304 => Framing::Length(0),
            100 | 102..=199 => {
                offset += len;
                if offset == filtered.len() {
                    return Ok(None);
                }
                continue;
            }
            _ => match (te_last, content_length) {
                (Some(_), _) if http10 => {
                    return Err(H1Error::Malformed("unexpected transfer-encoding parsed"));
                }
                (Some(te), _) if is_chunked(te) => Framing::Chunked,
                (Some(_), _) => Framing::UntilClose,
                // hyper's `DecodedLength::checked_new`: its two reserved values are too large.
                (None, Some(Some(n))) if n >= u64::MAX - 1 => {
                    return Err(H1Error::Malformed("message head is too large"));
                }
                (None, Some(Some(n))) => Framing::Length(n),
                (None, Some(None)) => {
                    return Err(H1Error::Malformed("invalid content-length parsed"));
                }
                (None, None) => Framing::UntilClose,
            },
        };
        return Ok(Some((
            Parsed {
                len: offset + len,
                status: code,
                location,
            },
            framing,
        )));
    }
}

/// hyper's `content_length_parse_all` one value at a time: every comma-separated element is
/// decimal digits and all are equal; `None` once any is not (`prev` is the agreed value so far,
/// `first` whether this is the first value).
fn content_length_values(value: &[u8], first: bool, prev: Option<u64>) -> Option<u64> {
    if !first && prev.is_none() {
        return None;
    }
    // `HeaderValue::to_str`: visible ASCII only.
    let line = std::str::from_utf8(value)
        .ok()
        .filter(|s| s.bytes().all(|b| b == b'\t' || (32..127).contains(&b)))?;
    let mut agreed = prev;
    for v in line.split(',') {
        let n = from_digits(v.trim().as_bytes())?;
        match agreed {
            None => agreed = Some(n),
            Some(a) if a != n => return None,
            Some(_) => {}
        }
    }
    agreed
}

fn from_digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// hyper's `is_chunked_` on the last `Transfer-Encoding` value.
fn is_chunked(value: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(value) else {
        return false;
    };
    if !s.bytes().all(|b| b == b'\t' || (32..127).contains(&b)) {
        return false;
    }
    s.rsplit(',')
        .next()
        .is_some_and(|e| e.trim().eq_ignore_ascii_case("chunked"))
}

/// hyper's texts for `httparse`'s errors.
fn parse_error_text(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName
        | httparse::Error::HeaderValue
        | httparse::Error::NewLine
        | httparse::Error::Token => "invalid HTTP header parsed",
        httparse::Error::Status => "invalid HTTP status-code parsed",
        httparse::Error::TooManyHeaders => "message head is too large",
        httparse::Error::Version => "invalid HTTP version parsed",
    }
}

/// Reads the body after the head (`rest` is what came with it) up to [`MAX_OUTPUT_BYTES`].
async fn read_body<S>(
    io: &mut S,
    mut buf: Spare,
    rest: Vec<u8>,
    framing: Framing,
) -> Result<Vec<u8>, H1BodyError>
where
    S: AsyncRead + Unpin,
{
    let mut body = Vec::new();
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => u64::MAX,
    };
    let mut chunked = Chunked::new();
    let mut input = rest;
    loop {
        let done = match framing {
            Framing::Length(_) | Framing::UntilClose => {
                let take = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                push_capped(&mut body, &input[..take]);
                if framing != Framing::UntilClose {
                    left -= take as u64;
                }
                left == 0
            }
            Framing::Chunked => chunked
                .feed(&input, &mut |data| push_capped(&mut body, data))
                .map_err(H1BodyError::Chunked)?,
        };
        // kubelet's ReadAtMost: more than 10 KiB is a non-fatal truncation.
        if done || body.len() >= MAX_OUTPUT_BYTES {
            return Ok(body);
        }
        buf.clear();
        buf.reserve(READ_CHUNK);
        let n = io.read_buf(&mut *buf).await.map_err(H1BodyError::Io)?;
        if n == 0 {
            return match framing {
                Framing::UntilClose => Ok(body),
                Framing::Chunked => Err(chunked
                    .eof_text()
                    .map_or(H1BodyError::Incomplete, H1BodyError::Chunked)),
                Framing::Length(_) => Err(H1BodyError::Incomplete),
            };
        }
        std::mem::swap(&mut input, &mut *buf);
    }
}

#[cfg(test)]
thread_local! {
    /// Bytes handed to the head parser on this thread (tests count the parse work of a head).
    pub(crate) static EXAMINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts `n` bytes handed to the head parser (tests only).
#[inline]
fn count_examined(n: usize) {
    #[cfg(test)]
    EXAMINED.with(|c| c.set(c.get() + n));
    #[cfg(not(test))]
    let _ = n;
}

/// Appends at most what is left of the 10 KiB.
fn push_capped(body: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_OUTPUT_BYTES.saturating_sub(body.len());
    body.extend_from_slice(&data[..data.len().min(room)]);
}

#[cfg(test)]
mod tests;
