//! One direction's frame reader: the connection preface, then frame headers, each frame's
//! payload read as its type says (`payload.rs`).

use super::sink::{FrameError, FrameSink};
use super::wire::{
    ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PADDED, PREFACE, PRIORITY,
    PUSH_PROMISE, RST_STREAM, SETTINGS, payload_len,
};

/// Where a reader is: between frames, or in which part of which frame.
#[derive(Debug, Clone, Copy)]
pub(super) enum State {
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
    pub(super) preface_left: usize,
    pub(super) head: [u8; 9],
    pub(super) head_len: usize,
    pub(super) state: State,
    /// RST_STREAM's code, GOAWAY's last stream and code, a SETTINGS parameter.
    pub(super) fixed: [u8; 8],
    pub(super) fixed_len: usize,
    /// Inside a header block: a CONTINUATION on `block_stream` must come next.
    pub(super) in_block: bool,
    pub(super) block_stream: u32,
    pub(super) frames: u64,
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
        chunk: &[u8],
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let mut pos = self.read_preface(chunk)?;
        while pos < chunk.len() {
            pos = match self.state {
                State::Head => self.read_head(chunk, pos, sink)?,
                State::Fixed {
                    kind,
                    stream,
                    left,
                    skip,
                } => self.read_fixed(chunk, pos, (kind, stream, left, skip), sink),
                State::Fragment { .. } => self.read_fragment(chunk, pos, sink)?,
                State::Settings { left } => self.read_setting(chunk, pos, left, sink),
                State::DataPad {
                    stream,
                    flags,
                    left,
                } => {
                    let pad = usize::from(chunk[pos]);
                    let rest = left - 1;
                    if pad > rest {
                        return Err(FrameError::Malformed("DATA"));
                    }
                    self.begin_data(stream, flags, rest - pad, pad, chunk, pos + 1, sink)?;
                    pos + 1
                }
                State::Data { .. } => self.read_data(chunk, pos, sink)?,
                State::Skip { left } => {
                    let take = left.min(chunk.len() - pos);
                    self.state = if take == left {
                        State::Head
                    } else {
                        State::Skip { left: left - take }
                    };
                    pos + take
                }
            };
        }
        Ok(())
    }

    /// Checks the part of the client's connection preface in `chunk`; returns where the frames
    /// start.
    fn read_preface(&mut self, chunk: &[u8]) -> Result<usize, FrameError> {
        if self.preface_left == 0 {
            return Ok(0);
        }
        let take = self.preface_left.min(chunk.len());
        let from = PREFACE.len() - self.preface_left;
        if chunk[..take] != PREFACE[from..from + take] {
            return Err(FrameError::Preface);
        }
        self.preface_left -= take;
        Ok(take)
    }

    /// Bytes of a frame header; the frame starts once all 9 are in.
    fn read_head(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<usize, FrameError> {
        let take = (9 - self.head_len).min(chunk.len() - pos);
        self.head[self.head_len..self.head_len + take].copy_from_slice(&chunk[pos..pos + take]);
        self.head_len += take;
        let pos = pos + take;
        if self.head_len == 9 {
            self.head_len = 0;
            self.start_frame(chunk, pos, sink)?;
        }
        Ok(pos)
    }

    /// A frame header is complete: what its payload is read as.
    fn start_frame(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let h = self.head;
        let len = payload_len(&h);
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
            HEADERS | PUSH_PROMISE => self.start_block(kind, flags, stream, len, sink)?,
            CONTINUATION => {
                if !self.in_block || stream != self.block_stream {
                    return Err(FrameError::Continuation);
                }
                self.begin_fragment(false, 0, len, flags & END_HEADERS != 0, sink)?;
            }
            RST_STREAM | GOAWAY => self.start_fixed(kind, stream, len)?,
            SETTINGS if flags & ACK != 0 => {
                sink.settings(true);
                if len > 0 {
                    self.state = State::Skip { left: len };
                }
            }
            SETTINGS => {
                if !len.is_multiple_of(6) {
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

    /// HEADERS or PUSH_PROMISE: a header block starts.
    fn start_block(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        len: usize,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
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
        self.begin_fragment(padded, skip, len, flags & END_HEADERS != 0, sink)
    }

    /// RST_STREAM or GOAWAY: their fixed fields are read, GOAWAY's debug data skipped.
    fn start_fixed(&mut self, kind: u8, stream: u32, len: usize) -> Result<(), FrameError> {
        let fixed = if kind == RST_STREAM {
            if len != 4 {
                return Err(FrameError::Malformed("RST_STREAM"));
            }
            4
        } else {
            if len < 8 {
                return Err(FrameError::Malformed("GOAWAY"));
            }
            8
        };
        self.state = State::Fixed {
            kind,
            stream,
            left: fixed,
            skip: len - fixed,
        };
        Ok(())
    }
}
