//! HTTP/2 framing (RFC 9113 §4 and §6) read incrementally from chunks split anywhere.
//!
//! The reader holds nothing but a frame header and a few fixed-size fields: header block
//! fragments (HEADERS, CONTINUATION, PUSH_PROMISE) and DATA payloads are handed out as slices
//! of the caller's chunk as they arrive, SETTINGS parameters one by one, and every other frame
//! is skipped without a copy. A header block of any length is thus followed in constant memory.
//!
//! From the bottom up: `wire.rs` (the frame layout), `sink.rs` (what a reader reports and why it
//! stops), `reader.rs` and `payload.rs` (the reader), and `write.rs` (the few frames the shim
//! writes itself).

mod payload;
mod reader;
mod sink;
mod wire;
mod write;

pub(crate) use reader::FrameReader;
pub use sink::FrameError;
pub(crate) use sink::FrameSink;
pub(crate) use wire::{PREFACE, only_upkeep};
pub(crate) use write::{goaway_frame, graceful_goaway, literal_headers, settings_frame};

#[cfg(test)]
mod tests;
