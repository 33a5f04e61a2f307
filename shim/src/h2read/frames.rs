//! HTTP/2 framing (RFC 9113 §4 and §6) read incrementally from chunks split anywhere.
//!
//! The reader holds nothing but a frame header and a few fixed-size fields: header block
//! fragments (HEADERS, CONTINUATION, PUSH_PROMISE) and DATA payloads are handed out as slices
//! of the caller's chunk as they arrive, SETTINGS parameters one by one, and every other frame
//! is skipped without a copy. A header block of any length is thus followed in constant memory.

mod write;

use std::ops::Range;

use bytes::Bytes;

#[cfg(test)]
use write::frame;
pub(crate) use write::{goaway_frame, graceful_goaway, literal_headers, settings_frame};

use super::hpack::HpackError;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
    /// CONTINUATION out of place, or another frame where a CONTINUATION must come.
    #[error("CONTINUATION out of sequence")]
    Continuation,
    /// A frame whose length contradicts its own fields (padding, fixed sizes).
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    /// The header block did not decode (HPACK).
    #[error("header block: {0}")]
    Hpack(#[from] HpackError),
    /// The reader gave up on purpose (fault injection in tests, or a bound of its own).
    #[error("{0}")]
    Abandoned(&'static str),
}

/// What a frame reader reports, in wire order.
pub(crate) trait FrameSink {
    /// A header block starts: HEADERS on `stream` (`end_stream` from its flags), or a
    /// PUSH_PROMISE (`promise`, decoded only to keep the HPACK table in step).
    fn block_start(&mut self, stream: u32, end_stream: bool, promise: bool);
    /// The next fragment of the block in progress (padding and priority fields excluded).
    fn block_fragment(&mut self, fragment: &[u8]) -> Result<(), FrameError>;
    /// The block in progress is complete (END_HEADERS).
    fn block_end(&mut self) -> Result<(), FrameError>;
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
    /// One parameter of a SETTINGS frame (not an ACK), in order.
    fn setting(&mut self, _id: u16, _value: u32) {}
    /// A SETTINGS frame (after its parameters), or its ACK.
    fn settings(&mut self, _ack: bool) {}
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Reading a 9-byte frame header.
    Head,
    /// Reading the fixed fields of RST_STREAM or GOAWAY (into `fixed`), then skipping `skip`.
    Fixed {
        kind: u8,
        stream: u32,
        left: usize,
        skip: usize,
    },
    /// A header block fragment frame: `left` payload bytes, of which a pad-length byte (when
    /// `pad_pending`), `skip` bytes of priority or promised stream ID, the fragment, and `pad`
    /// bytes of padding.
    Fragment {
        pad_pending: bool,
        skip: usize,
        left: usize,
        pad: usize,
        end_headers: bool,
    },
    /// SETTINGS parameters (6 bytes each, gathered in `fixed`).
    Settings { left: usize },
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
    /// RST_STREAM's code, GOAWAY's last stream and code, a SETTINGS parameter.
    fixed: [u8; 8],
    fixed_len: usize,
    /// Inside a header block: a CONTINUATION on `block_stream` must come next.
    in_block: bool,
    block_stream: u32,
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
            fixed: [0; 8],
            fixed_len: 0,
            in_block: false,
            block_stream: 0,
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
                State::Fixed {
                    kind,
                    stream,
                    left,
                    skip,
                } => {
                    let take = left.min(avail);
                    self.fixed[self.fixed_len..self.fixed_len + take]
                        .copy_from_slice(&buf[pos..pos + take]);
                    self.fixed_len += take;
                    pos += take;
                    if take == left {
                        self.state = if skip > 0 {
                            State::Skip { left: skip }
                        } else {
                            State::Head
                        };
                        self.fixed_frame(kind, stream, sink);
                    } else {
                        self.state = State::Fixed {
                            kind,
                            stream,
                            left: left - take,
                            skip,
                        };
                    }
                }
                State::Fragment {
                    pad_pending,
                    skip,
                    left,
                    pad,
                    end_headers,
                } => {
                    let next;
                    if pad_pending {
                        let p = usize::from(buf[pos]);
                        pos += 1;
                        if p + skip > left - 1 {
                            return Err(FrameError::Malformed("HEADERS"));
                        }
                        next = (false, skip, left - 1, p);
                    } else if skip > 0 {
                        let take = skip.min(avail);
                        pos += take;
                        next = (false, skip - take, left - take, pad);
                    } else {
                        let take = (left - pad).min(avail);
                        sink.block_fragment(&buf[pos..pos + take])?;
                        pos += take;
                        next = (false, 0, left - take, pad);
                    }
                    let (pad_pending, skip, left, pad) = next;
                    self.state = State::Fragment {
                        pad_pending,
                        skip,
                        left,
                        pad,
                        end_headers,
                    };
                    if !pad_pending && skip == 0 && left == pad {
                        self.fragment_done(pad, end_headers, sink)?;
                    }
                }
                State::Settings { left } => {
                    let take = (6 - self.fixed_len).min(left).min(avail);
                    self.fixed[self.fixed_len..self.fixed_len + take]
                        .copy_from_slice(&buf[pos..pos + take]);
                    self.fixed_len += take;
                    pos += take;
                    let left = left - take;
                    if self.fixed_len == 6 {
                        self.fixed_len = 0;
                        let f = self.fixed;
                        sink.setting(
                            u16::from_be_bytes([f[0], f[1]]),
                            u32::from_be_bytes([f[2], f[3], f[4], f[5]]),
                        );
                    }
                    if left == 0 {
                        self.state = State::Head;
                        sink.settings(false);
                    } else {
                        self.state = State::Settings { left };
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
        self.fixed_len = 0;
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
            HEADERS | PUSH_PROMISE => {
                let padded = flags & PADDED != 0;
                let skip = if kind == PUSH_PROMISE {
                    4
                } else if flags & PRIORITY != 0 {
                    5
                } else {
                    0
                };
                if len < usize::from(padded) + skip {
                    return Err(FrameError::Malformed(if kind == HEADERS {
                        "HEADERS"
                    } else {
                        "PUSH_PROMISE"
                    }));
                }
                let end_stream = kind == HEADERS && flags & END_STREAM != 0;
                sink.block_start(stream, end_stream, kind == PUSH_PROMISE);
                self.in_block = true;
                self.block_stream = stream;
                self.begin_fragment(padded, skip, len, flags & END_HEADERS != 0, sink)?;
            }
            CONTINUATION => {
                if !self.in_block || stream != self.block_stream {
                    return Err(FrameError::Continuation);
                }
                self.begin_fragment(false, 0, len, flags & END_HEADERS != 0, sink)?;
            }
            RST_STREAM => {
                if len != 4 {
                    return Err(FrameError::Malformed("RST_STREAM"));
                }
                self.state = State::Fixed {
                    kind,
                    stream,
                    left: 4,
                    skip: 0,
                };
            }
            GOAWAY => {
                if len < 8 {
                    return Err(FrameError::Malformed("GOAWAY"));
                }
                // The debug data is not needed: keep the first 8 bytes, skip the rest.
                self.state = State::Fixed {
                    kind,
                    stream,
                    left: 8,
                    skip: len - 8,
                };
            }
            SETTINGS if flags & ACK != 0 => {
                sink.settings(true);
                if len > 0 {
                    self.state = State::Skip { left: len };
                }
            }
            SETTINGS => {
                if len % 6 != 0 {
                    return Err(FrameError::Malformed("SETTINGS"));
                }
                if len == 0 {
                    sink.settings(false);
                } else {
                    self.state = State::Settings { left: len };
                }
            }
            _ if len > 0 => self.state = State::Skip { left: len },
            _ => {}
        }
        Ok(())
    }

    fn begin_fragment(
        &mut self,
        pad_pending: bool,
        skip: usize,
        left: usize,
        end_headers: bool,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        self.state = State::Fragment {
            pad_pending,
            skip,
            left,
            pad: 0,
            end_headers,
        };
        if left == 0 {
            self.fragment_done(0, end_headers, sink)?;
        }
        Ok(())
    }

    /// The fragment of a HEADERS, PUSH_PROMISE or CONTINUATION frame is in; `pad` bytes of
    /// padding remain.
    fn fragment_done(
        &mut self,
        pad: usize,
        end_headers: bool,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        self.state = if pad > 0 {
            State::Skip { left: pad }
        } else {
            State::Head
        };
        if end_headers {
            self.in_block = false;
            sink.block_end()?;
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

    fn fixed_frame(&mut self, kind: u8, stream: u32, sink: &mut impl FrameSink) {
        let p = self.fixed;
        self.fixed_len = 0;
        match kind {
            RST_STREAM => sink.rst_stream(stream, u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
            GOAWAY => {
                let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                sink.goaway(last, u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Count {
        blocks: usize,
        fragment_bytes: usize,
        settings: Vec<(u16, u32)>,
    }

    impl FrameSink for Count {
        fn block_start(&mut self, _: u32, _: bool, _: bool) {}
        fn block_fragment(&mut self, f: &[u8]) -> Result<(), FrameError> {
            self.fragment_bytes += f.len();
            Ok(())
        }
        fn block_end(&mut self) -> Result<(), FrameError> {
            self.blocks += 1;
            Ok(())
        }
        fn data(&mut self, _: u32, _: &Bytes, _: Range<usize>, _: bool) -> Result<(), FrameError> {
            Ok(())
        }
        fn rst_stream(&mut self, _: u32, _: u32) {}
        fn goaway(&mut self, _: u32, _: u32) {}
        fn setting(&mut self, id: u16, value: u32) {
            self.settings.push((id, value));
        }
    }

    #[test]
    fn a_long_continuation_chain_is_followed_without_holding_it() {
        let mut r = FrameReader::client();
        let mut sink = Count::default();
        r.feed(&Bytes::from_static(PREFACE), &mut sink)
            .expect("preface");
        r.feed(&Bytes::from(frame(HEADERS, 0, 1, &[0x82])), &mut sink)
            .expect("headers");
        let cont = Bytes::from(frame(CONTINUATION, 0, 1, &[0x82; 16 << 10]));
        for _ in 0..1024 {
            r.feed(&cont, &mut sink).expect("continuation");
            assert!(!r.at_boundary());
        }
        r.feed(
            &Bytes::from(frame(CONTINUATION, END_HEADERS, 1, &[0x82])),
            &mut sink,
        )
        .expect("last");
        assert_eq!(sink.blocks, 1);
        assert_eq!(sink.fragment_bytes, 2 + (16 << 10) * 1024);
        assert!(r.at_boundary());
    }

    #[test]
    fn padding_and_priority_are_not_part_of_the_fragment() {
        let mut sink = Count::default();
        let mut r = FrameReader::server();
        // Pad length 3, priority (5 bytes), fragment of 2, 3 bytes of padding.
        let payload = [3, 0, 0, 0, 0, 16, 0x88, 0x82, 0, 0, 0];
        let f = Bytes::from(frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &payload));
        for at in 0..f.len() {
            let mut r2 = FrameReader::server();
            let mut s2 = Count::default();
            r2.feed(&f.slice(..at), &mut s2).expect("first part");
            r2.feed(&f.slice(at..), &mut s2).expect("second part");
            assert_eq!((s2.blocks, s2.fragment_bytes), (1, 2), "split at {at}");
        }
        r.feed(&f, &mut sink).expect("frame");
        let bad = Bytes::from(frame(HEADERS, END_HEADERS | PADDED, 3, &[9, 0x88]));
        assert_eq!(
            FrameReader::server().feed(&bad, &mut sink),
            Err(FrameError::Malformed("HEADERS"))
        );
    }

    #[test]
    fn settings_parameters_are_reported_split_anywhere() {
        let mut payload = Vec::new();
        payload.extend_from_slice(&[0, 1, 0, 1, 0, 0]); // HEADER_TABLE_SIZE 65536
        payload.extend_from_slice(&[0, 6, 0, 0, 0x40, 0]); // MAX_HEADER_LIST_SIZE 16384
        let f = Bytes::from(frame(SETTINGS, 0, 0, &payload));
        for at in 0..=f.len() {
            let mut r = FrameReader::server();
            let mut sink = Count::default();
            r.feed(&f.slice(..at), &mut sink).expect("first part");
            r.feed(&f.slice(at..), &mut sink).expect("second part");
            assert_eq!(sink.settings, [(1, 65536), (6, 16384)], "split at {at}");
        }
        let odd = Bytes::from(frame(SETTINGS, 0, 0, &[0, 1, 0]));
        assert_eq!(
            FrameReader::server().feed(&odd, &mut Count::default()),
            Err(FrameError::Malformed("SETTINGS"))
        );
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
