//! HTTP/2 framing (RFC 9113 §4 and §6) read incrementally from chunks split anywhere.
//!
//! The reader keeps only what it must: the 9-byte frame header, the payload of the few frames
//! read whole (HEADERS, CONTINUATION, PUSH_PROMISE, RST_STREAM, the start of GOAWAY), and the
//! header block being assembled. DATA payloads are handed out as ranges of the caller's chunk
//! as they arrive; every other frame is skipped without a copy.

mod write;

use std::ops::Range;

use bytes::Bytes;

#[cfg(test)]
use write::frame;
pub(crate) use write::{goaway_frame, graceful_goaway, settings_frame, trailers_only};

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Largest header block (HEADERS + CONTINUATIONs) kept for decoding. gRPC header blocks are a
/// few hundred bytes; a block beyond this cannot be decoded, so the connection is no longer
/// observed (and its bytes still flow).
pub(crate) const MAX_HEADER_BLOCK: usize = 64 << 10;

pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const PUSH_PROMISE: u8 = 0x5;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const CONTINUATION: u8 = 0x9;

pub(super) const END_STREAM: u8 = 0x1;
pub(super) const ACK: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY: u8 = 0x20;

/// Why the framing could not be followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The client did not start with the connection preface.
    #[error("not an HTTP/2 connection preface")]
    Preface,
    /// A header block larger than [`MAX_HEADER_BLOCK`].
    #[error("header block larger than {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge,
    /// CONTINUATION out of place, or another frame where a CONTINUATION must come.
    #[error("CONTINUATION out of sequence")]
    Continuation,
    /// A frame whose length contradicts its own fields (padding, fixed sizes).
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    /// The header block did not decode (HPACK).
    #[error("header block: {0}")]
    Hpack(String),
}

/// What a frame reader reports, in wire order.
pub(crate) trait FrameSink {
    /// A complete header block (HEADERS and its CONTINUATIONs) on `stream`.
    fn headers(&mut self, stream: u32, end_stream: bool, block: &[u8]) -> Result<(), FrameError>;
    /// A complete PUSH_PROMISE header block: decoded only to keep the HPACK table in step.
    fn push_promise(&mut self, block: &[u8]) -> Result<(), FrameError>;
    /// Part of a DATA payload (`chunk[range]`, padding excluded); `end_stream` on the last part
    /// of a frame that ends the stream (the range may then be empty).
    fn data(
        &mut self,
        stream: u32,
        chunk: &Bytes,
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError>;
    /// RST_STREAM.
    fn rst_stream(&mut self, stream: u32, code: u32);
    /// GOAWAY.
    fn goaway(&mut self, last_stream: u32, code: u32);
    /// SETTINGS (only its ACK flag; the settings themselves are not needed).
    fn settings(&mut self, _ack: bool) {}
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Reading a 9-byte frame header.
    Head,
    /// Reading a payload that is needed whole (into `payload`).
    Whole {
        kind: u8,
        flags: u8,
        stream: u32,
        left: usize,
    },
    /// The pad-length byte of a padded DATA frame.
    DataPad { stream: u32, flags: u8, left: usize },
    /// DATA payload bytes, then `pad` bytes of padding.
    Data {
        stream: u32,
        end_stream: bool,
        left: usize,
        pad: usize,
    },
    /// Bytes nobody needs.
    Skip { left: usize },
}

/// One direction's frame reader.
#[derive(Debug)]
pub(crate) struct FrameReader {
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    state: State,
    payload: Vec<u8>,
    /// The header block being assembled, and whether a CONTINUATION must come next.
    block: Vec<u8>,
    block_stream: u32,
    block_end_stream: bool,
    block_promise: bool,
    in_block: bool,
    /// Debug data of the GOAWAY being read, skipped once its first 8 bytes are in.
    goaway_skip: usize,
    frames: u64,
}

impl FrameReader {
    /// A reader of the client's side (starts with the connection preface).
    pub(crate) fn client() -> Self {
        Self::new(PREFACE.len())
    }

    /// A reader of the server's side.
    pub(crate) fn server() -> Self {
        Self::new(0)
    }

    fn new(preface_left: usize) -> Self {
        Self {
            preface_left,
            head: [0; 9],
            head_len: 0,
            state: State::Head,
            payload: Vec::new(),
            block: Vec::new(),
            block_stream: 0,
            block_end_stream: false,
            block_promise: false,
            in_block: false,
            goaway_skip: 0,
            frames: 0,
        }
    }

    /// Whether the whole connection preface has been read (always true on the server's side).
    pub(crate) fn preface_done(&self) -> bool {
        self.preface_left == 0
    }

    /// Whether the bytes so far end exactly between two frames, outside a header block, after
    /// at least one frame: the only place a frame may be added to the stream.
    pub(crate) fn at_boundary(&self) -> bool {
        self.preface_left == 0
            && self.frames > 0
            && self.head_len == 0
            && matches!(self.state, State::Head)
            && !self.in_block
    }

    /// Reads `chunk`, reporting complete units to `sink`.
    pub(crate) fn feed(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let buf = &chunk[..];
        let mut pos = 0;
        if self.preface_left > 0 {
            let take = self.preface_left.min(buf.len());
            let from = PREFACE.len() - self.preface_left;
            if buf[..take] != PREFACE[from..from + take] {
                return Err(FrameError::Preface);
            }
            self.preface_left -= take;
            pos = take;
        }
        while pos < buf.len() {
            let avail = buf.len() - pos;
            match self.state {
                State::Head => {
                    let take = (9 - self.head_len).min(avail);
                    self.head[self.head_len..self.head_len + take]
                        .copy_from_slice(&buf[pos..pos + take]);
                    self.head_len += take;
                    pos += take;
                    if self.head_len == 9 {
                        self.head_len = 0;
                        self.start_frame(chunk, pos, sink)?;
                    }
                }
                State::Whole {
                    kind,
                    flags,
                    stream,
                    left,
                } => {
                    let take = left.min(avail);
                    self.payload.extend_from_slice(&buf[pos..pos + take]);
                    pos += take;
                    if take == left {
                        self.state = State::Head;
                        self.whole_frame(kind, flags, stream, sink)?;
                    } else {
                        self.state = State::Whole {
                            kind,
                            flags,
                            stream,
                            left: left - take,
                        };
                    }
                }
                State::DataPad {
                    stream,
                    flags,
                    left,
                } => {
                    let pad = usize::from(buf[pos]);
                    pos += 1;
                    let rest = left - 1;
                    if pad > rest {
                        return Err(FrameError::Malformed("DATA"));
                    }
                    self.begin_data(stream, flags, rest - pad, pad, chunk, pos, sink)?;
                }
                State::Data {
                    stream,
                    end_stream,
                    left,
                    pad,
                } => {
                    let take = left.min(avail);
                    let last = take == left;
                    sink.data(stream, chunk, pos..pos + take, end_stream && last)?;
                    pos += take;
                    self.state = if !last {
                        State::Data {
                            stream,
                            end_stream,
                            left: left - take,
                            pad,
                        }
                    } else if pad > 0 {
                        State::Skip { left: pad }
                    } else {
                        State::Head
                    };
                }
                State::Skip { left } => {
                    let take = left.min(avail);
                    pos += take;
                    self.state = if take == left {
                        State::Head
                    } else {
                        State::Skip { left: left - take }
                    };
                }
            }
        }
        Ok(())
    }

    fn start_frame(
        &mut self,
        chunk: &Bytes,
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let h = self.head;
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        self.frames += 1;
        if self.in_block && kind != CONTINUATION {
            return Err(FrameError::Continuation);
        }
        match kind {
            DATA if flags & PADDED != 0 => {
                if len == 0 {
                    return Err(FrameError::Malformed("DATA"));
                }
                self.state = State::DataPad {
                    stream,
                    flags,
                    left: len,
                };
            }
            DATA => self.begin_data(stream, flags, len, 0, chunk, pos, sink)?,
            HEADERS | CONTINUATION | PUSH_PROMISE | RST_STREAM | GOAWAY => {
                if kind == CONTINUATION && !self.in_block {
                    return Err(FrameError::Continuation);
                }
                // GOAWAY's debug data is not needed: keep its first 8 bytes, skip the rest.
                let keep = if kind == GOAWAY { len.min(8) } else { len };
                if keep > MAX_HEADER_BLOCK || self.block.len() + keep > MAX_HEADER_BLOCK {
                    return Err(FrameError::HeaderBlockTooLarge);
                }
                self.payload.clear();
                if keep == 0 {
                    self.whole_frame(kind, flags, stream, sink)?;
                    if len > keep {
                        self.state = State::Skip { left: len - keep };
                    }
                } else {
                    self.state = State::Whole {
                        kind,
                        flags,
                        stream,
                        left: keep,
                    };
                    if kind == GOAWAY && len > keep {
                        // The skip is queued by `whole_frame` once the 8 bytes are in.
                        self.payload.reserve(8);
                        self.goaway_skip = len - keep;
                    }
                }
            }
            SETTINGS => {
                sink.settings(flags & ACK != 0);
                if len > 0 {
                    self.state = State::Skip { left: len };
                }
            }
            _ if len > 0 => self.state = State::Skip { left: len },
            _ => {}
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn begin_data(
        &mut self,
        stream: u32,
        flags: u8,
        len: usize,
        pad: usize,
        chunk: &Bytes,
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let end_stream = flags & END_STREAM != 0;
        if len == 0 {
            if end_stream {
                sink.data(stream, chunk, pos..pos, true)?;
            }
            self.state = if pad > 0 {
                State::Skip { left: pad }
            } else {
                State::Head
            };
        } else {
            self.state = State::Data {
                stream,
                end_stream,
                left: len,
                pad,
            };
        }
        Ok(())
    }

    fn whole_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let p = std::mem::take(&mut self.payload);
        let result = self.whole_payload(kind, flags, stream, &p, sink);
        self.payload = p;
        self.payload.clear();
        if kind == GOAWAY && self.goaway_skip > 0 {
            self.state = State::Skip {
                left: self.goaway_skip,
            };
            self.goaway_skip = 0;
        }
        result
    }

    fn whole_payload(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        p: &[u8],
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        match kind {
            HEADERS | PUSH_PROMISE => {
                let name = if kind == HEADERS {
                    "HEADERS"
                } else {
                    "PUSH_PROMISE"
                };
                let mut frag = p;
                let mut pad = 0;
                if flags & PADDED != 0 {
                    let (&n, rest) = frag.split_first().ok_or(FrameError::Malformed(name))?;
                    pad = usize::from(n);
                    frag = rest;
                }
                let skip = if kind == PUSH_PROMISE {
                    4
                } else if flags & PRIORITY != 0 {
                    5
                } else {
                    0
                };
                if frag.len() < skip + pad {
                    return Err(FrameError::Malformed(name));
                }
                frag = &frag[skip..frag.len() - pad];
                self.block.clear();
                self.block.extend_from_slice(frag);
                self.block_stream = stream;
                self.block_end_stream = kind == HEADERS && flags & END_STREAM != 0;
                self.block_promise = kind == PUSH_PROMISE;
                self.in_block = true;
                if flags & END_HEADERS != 0 {
                    self.end_block(sink)?;
                }
            }
            CONTINUATION => {
                if stream != self.block_stream {
                    return Err(FrameError::Continuation);
                }
                self.block.extend_from_slice(p);
                if flags & END_HEADERS != 0 {
                    self.end_block(sink)?;
                }
            }
            RST_STREAM => {
                let code: [u8; 4] = p
                    .try_into()
                    .map_err(|_| FrameError::Malformed("RST_STREAM"))?;
                sink.rst_stream(stream, u32::from_be_bytes(code));
            }
            GOAWAY => {
                if p.len() < 8 {
                    return Err(FrameError::Malformed("GOAWAY"));
                }
                let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                sink.goaway(last, u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            _ => {}
        }
        Ok(())
    }

    fn end_block(&mut self, sink: &mut impl FrameSink) -> Result<(), FrameError> {
        self.in_block = false;
        let block = std::mem::take(&mut self.block);
        let r = if self.block_promise {
            sink.push_promise(&block)
        } else {
            sink.headers(self.block_stream, self.block_end_stream, &block)
        };
        self.block = block;
        self.block.clear();
        // A flood of large blocks must not leave a large buffer behind.
        self.block.shrink_to(4096);
        self.payload.shrink_to(4096);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Count {
        blocks: usize,
    }

    impl FrameSink for Count {
        fn headers(&mut self, _: u32, _: bool, _: &[u8]) -> Result<(), FrameError> {
            self.blocks += 1;
            Ok(())
        }
        fn push_promise(&mut self, _: &[u8]) -> Result<(), FrameError> {
            Ok(())
        }
        fn data(&mut self, _: u32, _: &Bytes, _: Range<usize>, _: bool) -> Result<(), FrameError> {
            Ok(())
        }
        fn rst_stream(&mut self, _: u32, _: u32) {}
        fn goaway(&mut self, _: u32, _: u32) {}
    }

    #[test]
    fn a_continuation_flood_is_refused_before_it_grows_the_buffer_past_the_cap() {
        let mut r = FrameReader::client();
        let mut sink = Count::default();
        r.feed(&Bytes::from_static(PREFACE), &mut sink)
            .expect("preface");
        r.feed(&Bytes::from(frame(HEADERS, 0, 1, &[0x82])), &mut sink)
            .expect("headers");
        let cont = Bytes::from(frame(CONTINUATION, 0, 1, &[0x82; 16 << 10]));
        let mut err = None;
        for _ in 0..1024 {
            if let Err(e) = r.feed(&cont, &mut sink) {
                err = Some(e);
                break;
            }
            assert!(r.block.len() <= MAX_HEADER_BLOCK);
        }
        assert_eq!(err, Some(FrameError::HeaderBlockTooLarge));
        assert_eq!(sink.blocks, 0);
    }

    #[test]
    fn junk_and_out_of_place_continuations_are_errors() {
        let mut sink = Count::default();
        let mut r = FrameReader::client();
        let junk = Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(r.feed(&junk, &mut sink), Err(FrameError::Preface));
        let mut r = FrameReader::server();
        let cont = Bytes::from(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
        assert_eq!(r.feed(&cont, &mut sink), Err(FrameError::Continuation));
        let mut r = FrameReader::server();
        let mut two = frame(HEADERS, 0, 1, &[0x82]);
        two.extend(frame(DATA, 0, 1, b"x"));
        assert_eq!(
            r.feed(&Bytes::from(two), &mut sink),
            Err(FrameError::Continuation)
        );
    }

    #[test]
    fn a_goaway_is_only_added_between_frames() {
        let mut sink = Count::default();
        let mut r = FrameReader::server();
        assert!(!r.at_boundary(), "nothing from the server yet");
        let settings = Bytes::from(settings_frame(false));
        r.feed(&settings.slice(..5), &mut sink).expect("half");
        assert!(!r.at_boundary());
        r.feed(&settings.slice(5..), &mut sink).expect("rest");
        assert!(r.at_boundary());
        r.feed(&Bytes::from(frame(HEADERS, 0, 1, &[0x88])), &mut sink)
            .expect("headers");
        assert!(!r.at_boundary(), "inside a header block");
    }
}
