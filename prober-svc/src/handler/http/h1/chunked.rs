//! The chunked body decoder: hyper's `ChunkedState` machine, byte for byte (its states, its
//! errors' texts as they read here — first letter lower-cased, as `go_errno` shows hyper's — and
//! its limits), fed with whatever the socket returned.

/// hyper's bound on the bytes of chunk extensions in one body.
const EXTENSIONS_LIMIT: u64 = 16 * 1024;
/// hyper's bound on the trailer section.
const TRAILER_LIMIT: usize = 16 * 1024;
/// hyper's bound on the number of trailer fields.
const TRAILER_FIELDS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Size,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
    End,
}

/// Where the decoder is in a chunked body.
#[derive(Debug)]
pub(super) struct Chunked {
    state: State,
    size: u64,
    extensions: u64,
    trailers: Vec<u8>,
    trailer_fields: usize,
}

impl Chunked {
    pub(super) fn new() -> Self {
        Self {
            state: State::Start,
            size: 0,
            extensions: 0,
            trailers: Vec::new(),
            trailer_fields: 0,
        }
    }

    /// Decodes `input`, passing chunk data to `data`; `true` once the body (and its trailers)
    /// ended. Bytes after the end are ignored, as hyper ignores them on a closing connection.
    pub(super) fn feed(
        &mut self,
        mut input: &[u8],
        data: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, &'static str> {
        while !input.is_empty() && self.state != State::End {
            if self.state == State::Body {
                let n = input
                    .len()
                    .min(usize::try_from(self.size).unwrap_or(usize::MAX));
                data(&input[..n]);
                self.size -= n as u64;
                input = &input[n..];
                if self.size == 0 {
                    self.state = State::BodyCr;
                }
                continue;
            }
            let b = input[0];
            input = &input[1..];
            self.state = self.step(b)?;
            if self.state == State::End && !self.trailers.is_empty() {
                self.check_trailers()?;
            }
        }
        Ok(self.state == State::End)
    }

    /// The error of a connection that ended before the body did: hyper's for a chunk's data,
    /// or the one its byte reader gives everywhere else.
    pub(super) fn eof_text(&self) -> Option<&'static str> {
        (self.state != State::Body).then_some("unexpected EOF during chunk size line")
    }

    // One function on purpose: the decoder's whole state machine, one arm per state, so that
    // every transition and every error text is read in one place.
    fn step(&mut self, b: u8) -> Result<State, &'static str> {
        use State::*;
        Ok(match self.state {
            Start => match hex(b) {
                Some(d) => {
                    self.add_digit(d)?;
                    Size
                }
                None => return Err("invalid chunk size line: missing size digit"),
            },
            Size => match (hex(b), b) {
                (Some(d), _) => {
                    self.add_digit(d)?;
                    Size
                }
                (None, b'\t' | b' ') => SizeLws,
                (None, b';') => Extension,
                (None, b'\r') => SizeLf,
                _ => return Err("invalid chunk size line: Invalid Size"),
            },
            SizeLws => match b {
                b'\t' | b' ' => SizeLws,
                b';' => Extension,
                b'\r' => SizeLf,
                _ => return Err("invalid chunk size linear white space"),
            },
            Extension => match b {
                b'\r' => SizeLf,
                b'\n' => return Err("invalid chunk extension contains newline"),
                _ => {
                    self.extensions += 1;
                    if self.extensions >= EXTENSIONS_LIMIT {
                        return Err("chunk extensions over limit");
                    }
                    Extension
                }
            },
            SizeLf => match b {
                b'\n' if self.size == 0 => EndCr,
                b'\n' => Body,
                _ => return Err("invalid chunk size LF"),
            },
            BodyCr => match b {
                b'\r' => BodyLf,
                _ => return Err("invalid chunk body CR"),
            },
            BodyLf => match b {
                b'\n' => {
                    self.size = 0;
                    Start
                }
                _ => return Err("invalid chunk body LF"),
            },
            Trailer => {
                self.push_trailer(b)?;
                if b == b'\r' { TrailerLf } else { Trailer }
            }
            TrailerLf => match b {
                b'\n' => {
                    if self.trailer_fields >= TRAILER_FIELDS {
                        return Err("chunk trailers count overflow");
                    }
                    self.trailer_fields += 1;
                    self.push_trailer(b)?;
                    EndCr
                }
                _ => return Err("invalid trailer end LF"),
            },
            EndCr => {
                if b == b'\r' {
                    if !self.trailers.is_empty() {
                        self.push_trailer(b)?;
                    }
                    EndLf
                } else {
                    self.push_trailer(b)?;
                    Trailer
                }
            }
            EndLf => match b {
                b'\n' => {
                    if !self.trailers.is_empty() {
                        self.push_trailer(b)?;
                    }
                    End
                }
                _ => return Err("invalid chunk end LF"),
            },
            Body | End => self.state,
        })
    }

    fn add_digit(&mut self, d: u8) -> Result<(), &'static str> {
        self.size = self
            .size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(d)))
            .ok_or("invalid chunk size: overflow")?;
        Ok(())
    }

    fn push_trailer(&mut self, b: u8) -> Result<(), &'static str> {
        if self.trailers.len() >= TRAILER_LIMIT {
            return Err("chunk trailers bytes over limit");
        }
        self.trailers.push(b);
        Ok(())
    }

    /// hyper parses the trailer section once it ended; a malformed one fails the body.
    fn check_trailers(&self) -> Result<(), &'static str> {
        let mut fields = vec![httparse::EMPTY_HEADER; self.trailer_fields];
        match httparse::parse_headers(&self.trailers, &mut fields) {
            Ok(httparse::Status::Complete((_, fields))) => {
                // `HeaderValue::from_bytes`: no control bytes other than tab.
                let bad = fields
                    .iter()
                    .any(|f| f.value.iter().any(|&c| (c < 32 && c != b'\t') || c == 127));
                if bad {
                    return Err("invalid header value");
                }
                Ok(())
            }
            Ok(httparse::Status::Partial) => Err("partial header"),
            // httparse's own texts, which hyper passed on.
            Err(e) => Err(match e {
                httparse::Error::HeaderName => "invalid header name",
                httparse::Error::HeaderValue => "invalid header value",
                httparse::Error::NewLine => "invalid new line",
                httparse::Error::Status => "invalid response status",
                httparse::Error::Token => "invalid token",
                httparse::Error::TooManyHeaders => "too many headers",
                httparse::Error::Version => "invalid HTTP version",
            }),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
