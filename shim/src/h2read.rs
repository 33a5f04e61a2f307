//! A passive HTTP/2 reader: it follows the framing of bytes another part copies (never the
//! other way round: the copy does not wait for it), decodes every header block with HPACK, and
//! reports what each direction says in HTTP/2's own terms through [`StreamEvents`]: header
//! blocks (the fields its user wants, [`Wanted`]), DATA, stream ends, resets and GOAWAY. What the
//! streams mean is the user's business (`observe` reads CRI calls from them).
//!
//! Each direction of a connection has a [`DirectionReader`]. Header blocks are decoded as their
//! fragments arrive (`hpack.rs`), whatever their length, so the reader follows everything the two
//! peers accept. Each direction's HPACK limits are the ones its peer set in SETTINGS, read on the
//! other direction: the two readers of a connection share one [`HeaderLimits`].
//!
//! An error ([`FrameError`]) means the bytes cannot be followed any further (junk, what a peer
//! would refuse too, or the user gave up): the reader must not be fed again.

mod frames;
mod header_block;
mod hpack;

use std::ops::Range;

pub use frames::FrameError;
pub(crate) use frames::only_upkeep;
pub(crate) use frames::{
    FrameReader, FrameSink, goaway_frame, graceful_goaway, literal_headers, settings_frame,
};
pub use header_block::{FieldValue, HeaderBlock, MAX_WANTED, Wanted, WantedField};
pub use hpack::{HpackError, HuffmanError};

use hpack::{BlockDecoder, INITIAL_TABLE_SIZE};

/// Length of the client's HTTP/2 connection preface.
pub const PREFACE_LEN: usize = frames::PREFACE.len();

/// SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2).
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// SETTINGS_MAX_HEADER_LIST_SIZE.
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Which peer wrote the bytes a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client: it opens streams.
    Client,
    /// The server: it answers them.
    Server,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Self::Client => 0,
            Self::Server => 1,
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Client => Self::Server,
            Self::Server => Self::Client,
        }
    }
}

/// The HPACK limits of one connection, as its peers set them in SETTINGS: what one direction
/// announces bounds what the other may send. Shared by the connection's two readers.
#[derive(Debug, Clone)]
pub struct HeaderLimits {
    /// By encoding side: the largest dynamic table its peer ever allowed in SETTINGS (the
    /// largest, not the last: a lowered size applies only once acknowledged, and the reader
    /// must never refuse what the peer still accepts).
    table_allowed: [u64; 2],
    /// By encoding side: the largest SETTINGS_MAX_HEADER_LIST_SIZE its peer set (None: no
    /// limit).
    list_allowed: [Option<u64>; 2],
}

impl Default for HeaderLimits {
    fn default() -> Self {
        Self {
            table_allowed: [INITIAL_TABLE_SIZE; 2],
            list_allowed: [None; 2],
        }
    }
}

/// What a direction's reader reports, in wire order. An error ends the reading: the reader is
/// not fed again.
pub trait StreamEvents {
    /// A complete header block on `stream` (HEADERS and its CONTINUATIONs), `end_stream` from
    /// its HEADERS frame. PUSH_PROMISE blocks are decoded (to keep HPACK in step), not reported.
    fn headers(
        &mut self,
        stream: u32,
        block: HeaderBlock,
        end_stream: bool,
    ) -> Result<(), FrameError>;

    /// DATA payload bytes of `stream`: `chunk[range]` (padding left out; empty for an empty
    /// frame that ends the stream). `end_stream` on the frame's last bytes.
    fn data(
        &mut self,
        stream: u32,
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError>;

    /// RST_STREAM with its error code.
    fn reset(&mut self, stream: u32, code: u32);

    /// GOAWAY: streams above `last_stream` will not be served.
    fn goaway(&mut self, last_stream: u32, code: u32);
}

/// One direction's reader: its framing and its HPACK state.
#[derive(Debug)]
pub struct DirectionReader {
    side: Side,
    frames: FrameReader,
    hpack: BlockDecoder,
    /// The header block being read: its stream, END_STREAM, and whether it is a PUSH_PROMISE.
    block: Option<(u32, bool, bool)>,
}

impl DirectionReader {
    /// The reader of the bytes `side` writes, keeping the `wanted` header fields.
    pub fn new(side: Side, wanted: Wanted) -> Self {
        Self {
            side,
            frames: match side {
                Side::Client => FrameReader::client(),
                Side::Server => FrameReader::server(),
            },
            hpack: BlockDecoder::new(wanted),
            block: None,
        }
    }

    /// Which peer's bytes this reads.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Whether the client's connection preface has been read (always true on the server's
    /// side).
    pub fn preface_done(&self) -> bool {
        self.frames.preface_done()
    }

    /// Whether the bytes read so far end between two frames, outside a header block: the only
    /// place a frame may be added to the stream.
    pub fn at_boundary(&self) -> bool {
        self.frames.at_boundary()
    }

    /// Reads `chunk`, the next bytes of this direction, reporting to `events`; `limits` are the
    /// connection's, shared with the other direction's reader.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        limits: &mut HeaderLimits,
        events: &mut impl StreamEvents,
    ) -> Result<(), FrameError> {
        let mut sink = Sink {
            side: self.side,
            hpack: &mut self.hpack,
            block: &mut self.block,
            limits,
            events,
        };
        self.frames.feed(chunk, &mut sink)
    }
}

/// The frame reader's units turned into [`StreamEvents`].
struct Sink<'a, E> {
    side: Side,
    hpack: &'a mut BlockDecoder,
    block: &'a mut Option<(u32, bool, bool)>,
    limits: &'a mut HeaderLimits,
    events: &'a mut E,
}

impl<E: StreamEvents> FrameSink for Sink<'_, E> {
    fn block_start(&mut self, stream: u32, end_stream: bool, promise: bool) {
        *self.block = Some((stream, end_stream, promise));
    }

    fn block_fragment(&mut self, fragment: &[u8]) -> Result<(), FrameError> {
        let allowed = self.limits.table_allowed[self.side.index()];
        Ok(self.hpack.feed(fragment, allowed)?)
    }

    fn block_end(&mut self) -> Result<(), FrameError> {
        let block = self.hpack.finish()?;
        let Some((stream, end_stream, promise)) = self.block.take() else {
            return Ok(());
        };
        if promise {
            return Ok(());
        }
        if self.limits.list_allowed[self.side.index()].is_some_and(|max| block.list_size() > max) {
            // The receiving peer refuses the stream (a reset the reader sees); the block was
            // still decoded, as the peer decodes it, to keep HPACK in step.
            tracing::debug!(side = ?self.side, stream, size = block.list_size(),
                "header list above the receiving peer's SETTINGS_MAX_HEADER_LIST_SIZE");
        }
        self.events.headers(stream, block, end_stream)
    }

    fn data(
        &mut self,
        stream: u32,
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        self.events.data(stream, chunk, range, end_stream)
    }

    fn rst_stream(&mut self, stream: u32, code: u32) {
        self.events.reset(stream, code);
    }

    fn goaway(&mut self, last_stream: u32, code: u32) {
        tracing::debug!(side = ?self.side, last_stream, code, "GOAWAY");
        self.events.goaway(last_stream, code);
    }

    fn setting(&mut self, id: u16, value: u32) {
        // What this side announces limits what the other side may send it.
        let encoder = self.side.other().index();
        let value = u64::from(value);
        match id {
            SETTINGS_HEADER_TABLE_SIZE => {
                let t = &mut self.limits.table_allowed[encoder];
                *t = (*t).max(value);
            }
            SETTINGS_MAX_HEADER_LIST_SIZE => {
                let l = &mut self.limits.list_allowed[encoder];
                *l = Some(l.map_or(value, |l| l.max(value)));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
