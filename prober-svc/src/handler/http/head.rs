//! kubelet's response-head limits for HTTP/1, applied in front of the head parser (`h1`).
//!
//! Go's transport (1.24 and later, which kubelet 1.33 is built with) reads a response head of any
//! number of fields and skips any number of interim (1xx) responses; what it bounds is the bytes:
//! every interim head plus the final head together may not pass `MaxResponseHeaderBytes`, 10 MiB
//! by default (kubelet keeps the default). The parser (hyper's `httparse`, with hyper's bound of
//! 100 fields) parses a head again from its start on every attempt. So [`Scan`] reads the heads
//! first: in one pass, line by line, it counts the head bytes against Go's limit, drops the interim
//! responses (Go does not show them either) and every field the probe does not use, and hands the
//! parser the status line and the few fields that frame the body or that the probe reads.
//!
//! A field line that the parser would reject (no colon, a name that is not a token) is passed on
//! so that the parser rejects it with its own error; one longer than any name with no colon yet
//! is cut to a short prefix that is rejected the same way.

#[cfg(test)]
use std::io;
#[cfg(test)]
use std::pin::Pin;
#[cfg(test)]
use std::task::{Context, Poll, ready};

#[cfg(test)]
use tokio::io::{AsyncRead, ReadBuf};

/// Go's `MaxResponseHeaderBytes` default (`http.DefaultMaxHeaderBytes`... for responses, the
/// transport's 10 << 20).
pub const MAX_HEAD_BYTES: usize = 10 << 20;

/// Fields hyper needs to frame the body, and the one the probe reads.
const KEPT: [&[u8]; 4] = [
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"location",
];

/// At most this many kept fields reach hyper (hyper's own bound is 100): repeats of a kept name
/// past it are dropped (Go reads the first `Location`; hyper checks repeated `Content-Length`s).
const MAX_KEPT_FIELDS: usize = 64;

/// A field name longer than this is no kept name; a line this long without a colon is malformed.
const NAME_PREFIX: usize = 64;

/// The line buffer's first capacity: a usual status or field line.
const LINE_ROOM: usize = 96;

/// The heads passed Go's limit (Go's text).
#[derive(Debug, thiserror::Error)]
#[error("net/http: server response headers exceeded {MAX_HEAD_BYTES} bytes; aborted")]
pub(crate) struct HeadTooLarge;

/// Where the reader is in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before a status line (the first, or the next after an interim response).
    Status,
    /// Among the fields of a head.
    Fields,
    /// The final head is over: everything passes through.
    Body,
}

/// What becomes of the line being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineMode {
    /// Not known yet: buffered until the name (or the line) ends.
    Undecided,
    /// Passed to hyper whole.
    Keep,
    /// Not passed; its bytes are only counted.
    Drop,
    /// No colon within [`NAME_PREFIX`] bytes: a short malformed line goes to hyper instead.
    Malformed,
}

/// The line-by-line reader of the heads (no I/O: tests feed it bytes).
#[derive(Debug)]
pub(super) struct Scan {
    phase: Phase,
    /// The head being read is an interim (1xx other than 101) response.
    interim: bool,
    mode: LineMode,
    line: Vec<u8>,
    /// The previous field line was kept (a continuation line follows its fate).
    last_kept: bool,
    kept_fields: usize,
    head_bytes: usize,
}

impl Scan {
    pub(super) fn new() -> Self {
        Self {
            phase: Phase::Status,
            interim: false,
            mode: LineMode::Undecided,
            // Room for a usual status or field line, so reading a head does not grow it step
            // by step (one allocation instead of several per probe).
            line: Vec::with_capacity(LINE_ROOM),
            last_kept: false,
            kept_fields: 0,
            head_bytes: 0,
        }
    }

    /// Reads `chunk`, appending what hyper is to see to `out`.
    pub(super) fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<u8>) -> Result<(), HeadTooLarge> {
        while !chunk.is_empty() {
            if self.phase == Phase::Body {
                out.extend_from_slice(chunk);
                return Ok(());
            }
            let (seg, ends) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..=i], true),
                None => (chunk, false),
            };
            chunk = &chunk[seg.len()..];
            self.head_bytes += seg.len();
            if self.head_bytes > MAX_HEAD_BYTES {
                return Err(HeadTooLarge);
            }
            self.take(seg);
            if ends {
                self.end_line(out);
            }
        }
        Ok(())
    }

    /// The final head is over (what `feed` passes on now is body).
    pub(super) fn head_done(&self) -> bool {
        self.phase == Phase::Body
    }

    /// Adds a piece of the current line.
    fn take(&mut self, seg: &[u8]) {
        match self.mode {
            LineMode::Drop | LineMode::Malformed => return,
            LineMode::Keep => return self.line.extend_from_slice(seg),
            LineMode::Undecided => self.line.extend_from_slice(seg),
        }
        if self.phase == Phase::Status {
            // The status line is kept whole (the head limit bounds it).
            self.mode = LineMode::Keep;
            return;
        }
        if matches!(self.line.first(), Some(b' ' | b'\t')) {
            // A continuation line shares the fate of the field it continues.
            self.mode = if self.last_kept && !self.interim {
                LineMode::Keep
            } else {
                LineMode::Drop
            };
        } else if let Some(colon) = self.line.iter().position(|&b| b == b':') {
            let name = &self.line[..colon];
            self.mode = if !name.iter().all(|&b| is_token(b)) || name.is_empty() {
                // hyper rejects it, as Go does.
                LineMode::Keep
            } else if !self.interim
                && self.kept_fields < MAX_KEPT_FIELDS
                && KEPT.iter().any(|k| name.eq_ignore_ascii_case(k))
            {
                LineMode::Keep
            } else {
                LineMode::Drop
            };
        } else if self.line.len() > NAME_PREFIX {
            self.mode = LineMode::Malformed;
            self.line.truncate(NAME_PREFIX);
        }
        if self.mode == LineMode::Drop {
            self.line.clear();
        }
    }

    /// The current line ended (its `\n` was taken).
    fn end_line(&mut self, out: &mut Vec<u8>) {
        let blank = self.line == b"\r\n" || self.line == b"\n";
        match self.phase {
            // Empty lines before a status line are skipped (hyper's parser skips them too), so
            // the parser's input starts with the status line.
            Phase::Status if blank => {}
            Phase::Status => {
                self.interim = is_interim(&self.line);
                if !self.interim {
                    out.extend_from_slice(&self.line);
                }
                self.phase = Phase::Fields;
            }
            Phase::Fields if blank => {
                if self.interim {
                    self.interim = false;
                    self.phase = Phase::Status;
                } else {
                    out.extend_from_slice(&self.line);
                    self.phase = Phase::Body;
                }
            }
            Phase::Fields => match self.mode {
                LineMode::Keep | LineMode::Undecided if !self.interim => {
                    out.extend_from_slice(&self.line);
                    self.kept_fields += 1;
                    self.last_kept = true;
                }
                LineMode::Malformed if !self.interim => {
                    out.extend_from_slice(&self.line);
                    out.extend_from_slice(b"\r\n");
                    self.last_kept = false;
                }
                _ => self.last_kept = false,
            },
            Phase::Body => {}
        }
        self.line.clear();
        self.mode = LineMode::Undecided;
    }

    /// The connection ended inside a head: what was read of the line goes to hyper, which then
    /// reports the incomplete message with its own error.
    pub(super) fn end_of_stream(&mut self, out: &mut Vec<u8>) {
        if self.phase != Phase::Body && !self.interim && self.mode != LineMode::Drop {
            out.extend_from_slice(&self.line);
        }
        self.line.clear();
        self.phase = Phase::Body;
    }
}

/// An interim response: 1xx other than 101 (Go treats 101 as final, and so does hyper).
fn is_interim(status_line: &[u8]) -> bool {
    match status_line.get(9..12) {
        Some([b'1', b, c])
            if status_line.starts_with(b"HTTP/") && status_line.get(8) == Some(&b' ') =>
        {
            b.is_ascii_digit() && c.is_ascii_digit() && !(*b == b'0' && *c == b'1')
        }
        _ => false,
    }
}

/// RFC 9110 token characters (a field name).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The connection as hyper reads it: the heads filtered by [`Scan`], then the body as it comes
/// (what hyper's client read; the tests compare `h1` with it).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct HeadReader<S> {
    inner: S,
    scan: Scan,
    /// What hyper has still to read, from `pos`.
    out: Vec<u8>,
    pos: usize,
}

#[cfg(test)]
impl<S> HeadReader<S> {
    /// Wraps a fresh connection, before its response.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            scan: Scan::new(),
            out: Vec::new(),
            pos: 0,
        }
    }
}

#[cfg(test)]
impl<S: AsyncRead + Unpin> AsyncRead for HeadReader<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.pos);
                buf.put_slice(&this.out[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.out.len() {
                    this.out.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.scan.phase == Phase::Body {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.scan.end_of_stream(&mut this.out);
                continue;
            }
            this.scan
                .feed(read.filled(), &mut this.out)
                .map_err(io::Error::other)?;
        }
    }
}

#[cfg(test)]
crate::handler::write_through::write_through!(HeadReader);

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(input: &[u8]) -> Result<Vec<u8>, HeadTooLarge> {
        let mut scan = Scan::new();
        let mut out = Vec::new();
        // Byte by byte and whole: the result must not depend on how the bytes arrive.
        let mut whole = Vec::new();
        Scan::new().feed(input, &mut whole)?;
        for b in input {
            scan.feed(std::slice::from_ref(b), &mut out)?;
        }
        assert_eq!(out, whole);
        Ok(out)
    }

    #[test]
    fn interim_responses_and_unused_fields_are_dropped_the_rest_passes() {
        let input = b"HTTP/1.1 100 Continue\r\nX: 1\r\n\r\nHTTP/1.1 103 Early\r\nLink: a\r\n\r\n\
HTTP/1.1 302 Found\r\nServer: x\r\nlocation: /next\r\nX-Long: aaa\r\n  folded\r\nContent-Length: 4\r\n\r\nbody";
        assert_eq!(
            filtered(input).expect("within the limit"),
            b"HTTP/1.1 302 Found\r\nlocation: /next\r\nContent-Length: 4\r\n\r\nbody"
        );
    }

    #[test]
    fn malformed_lines_still_reach_hyper() {
        let long = [b'a'; 100];
        let mut input = b"HTTP/1.1 200 OK\r\nBad Name: x\r\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\r\n\r\n");
        let out = filtered(&input).expect("within the limit");
        let mut want = b"HTTP/1.1 200 OK\r\nBad Name: x\r\n".to_vec();
        want.extend_from_slice(&long[..NAME_PREFIX]);
        want.extend_from_slice(b"\r\n\r\n");
        assert_eq!(out, want);
    }

    #[test]
    fn switching_protocols_is_final() {
        assert!(!is_interim(b"HTTP/1.1 101 Switching\r\n"));
        assert!(is_interim(b"HTTP/1.1 100 Continue\r\n"));
        assert!(is_interim(b"HTTP/1.0 199 X\r\n"));
        assert!(!is_interim(b"HTTP/1.1 200 OK\r\n"));
        assert!(!is_interim(b"garbage 100\r\n"));
    }

    #[test]
    fn the_limit_counts_every_head_and_nothing_of_the_body() {
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
        let last = b"HTTP/1.1 200 OK\r\n\r\n";
        let mut input = Vec::new();
        while input.len() + interim.len() + last.len() <= MAX_HEAD_BYTES {
            input.extend_from_slice(interim);
        }
        let pad = MAX_HEAD_BYTES - input.len() - last.len();
        // Pad the last interim head with a field so the heads end exactly at the limit.
        input.truncate(input.len() - 2);
        let field = format!("P: {}\r\n", "a".repeat(pad - 5));
        input.extend_from_slice(field.as_bytes());
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(last);
        assert_eq!(input.len(), MAX_HEAD_BYTES);
        let mut ok = input.clone();
        ok.extend_from_slice(&[b'b'; 100_000]);
        let mut out = Vec::new();
        Scan::new().feed(&ok, &mut out).expect("at the limit");
        assert!(out.starts_with(last));
        let mut over = input[..input.len() - last.len()].to_vec();
        over.extend_from_slice(b"HTTP/1.1 200 OK\r\nX\r\n\r\n");
        assert!(Scan::new().feed(&over, &mut Vec::new()).is_err());
    }
}
