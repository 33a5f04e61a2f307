//! What a frame reader reports ([`FrameSink`]), and why it stops ([`FrameError`]).

use std::ops::Range;

use crate::h2read::hpack::HpackError;

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
        chunk: &[u8],
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
