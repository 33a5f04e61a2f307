//! The passive HTTP/2 reader beside the relay.
//!
//! Each direction of a relayed connection has a [`SideReader`]: it follows the framing of the
//! bytes the relay has copied (never the other way round: the relay does not wait for it),
//! decodes every header block with HPACK, maps stream IDs to `:path`, keeps the DATA of the
//! watched methods, and sees trailers, RST_STREAM and GOAWAY. The two sides of a connection
//! share one [`Conversation`]: the client's side opens calls, the server's side ends them.
//!
//! Header blocks are decoded as their fragments arrive (`hpack.rs`), whatever their length, so
//! the reader follows everything the two peers accept. Each direction's HPACK limits are the
//! ones its peer set in SETTINGS, read on the other direction.
//!
//! If either side still cannot follow the bytes (junk, what a peer would refuse too, a bound of
//! the calls' bookkeeping, a bug), the connection stops being observed: logged once, counted in
//! `podward_shim_observe_errors_total`, its bytes keep flowing unchanged, and the index is
//! healed by relisting from containerd while it stays unobserved (`heal.rs`).

mod calls;
mod fields;
mod frames;
mod hpack;

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

pub use calls::Recorder;
pub use frames::FrameError;
pub(crate) use frames::{
    FrameReader, FrameSink, goaway_frame, graceful_goaway, settings_frame, trailers_only,
};
pub use hpack::{HpackError, HuffmanError};

/// Length of the client's HTTP/2 connection preface.
pub const PREFACE_LEN: usize = frames::PREFACE.len();

use crate::fault::Faults;
use calls::Calls;
use hpack::{BlockDecoder, INITIAL_TABLE_SIZE};

/// SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2).
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// SETTINGS_MAX_HEADER_LIST_SIZE.
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Which peer wrote the bytes a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (kubelet): requests.
    Client,
    /// The server (containerd): responses.
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

/// What both sides of one connection know together.
#[derive(Debug)]
pub struct Conversation {
    shared: Mutex<Shared>,
    /// Fired when the client resets a stream or leaves (a held response stops waiting).
    caller_gone: tokio::sync::Notify,
}

#[derive(Debug)]
struct Shared {
    observing: bool,
    /// Observation stopped because the client's first bytes were not an HTTP/2 preface.
    junk: bool,
    calls: Calls,
    /// By encoding side: the largest dynamic table its peer ever allowed in SETTINGS (the
    /// largest, not the last: a lowered size applies only once acknowledged, and the reader
    /// must never refuse what the peer still accepts).
    table_allowed: [u64; 2],
    /// By encoding side: the largest SETTINGS_MAX_HEADER_LIST_SIZE its peer set (None: no
    /// limit).
    list_allowed: [Option<u64>; 2],
}

impl Conversation {
    /// A new connection's conversation.
    pub fn new(recorder: Arc<Recorder>) -> Arc<Self> {
        Arc::new(Self {
            shared: Mutex::new(Shared {
                observing: true,
                junk: false,
                calls: Calls::new(recorder),
                table_allowed: [INITIAL_TABLE_SIZE; 2],
                list_allowed: [None; 2],
            }),
            caller_gone: tokio::sync::Notify::new(),
        })
    }

    /// The client reset a stream or left.
    pub fn note_caller_gone(&self) {
        self.caller_gone.notify_one();
    }

    /// Resolves at the next [`note_caller_gone`](Self::note_caller_gone) (or at once if one
    /// happened since the last wait).
    pub async fn caller_gone(&self) {
        self.caller_gone.notified().await;
    }

    /// Whether the connection is still being read.
    pub fn observing(&self) -> bool {
        self.shared.lock().observing
    }

    /// Open streams (None when the connection is no longer observed: unknown).
    pub fn active_streams(&self) -> Option<usize> {
        let s = self.shared.lock();
        s.observing.then(|| s.calls.active())
    }

    /// The connection ended; `client_left` says whose side closed first.
    pub fn close(&self, client_left: bool) {
        let mut s = self.shared.lock();
        if s.observing {
            s.calls.close(client_left);
        }
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        let s = self.shared.get_mut();
        if !s.observing && !s.junk {
            s.calls.recorder().blindness().connection_closed();
        }
    }
}

impl Shared {
    fn stop_observing(&mut self, side: Side, e: &FrameError) {
        self.observing = false;
        self.junk = *e == FrameError::Preface;
        let recorder = self.calls.recorder();
        recorder.metrics().observe_errors.inc();
        if self.junk {
            // Not HTTP/2: no CRI call can be made on it, nothing to heal.
            tracing::debug!(
                ?side,
                "not an HTTP/2 connection; relayed unchanged, not observed"
            );
        } else {
            recorder.blindness().connection_lost();
            tracing::warn!(
                ?side,
                error = %e,
                "cannot follow this CRI connection's HTTP/2; it is relayed unchanged but no \
                 longer observed (the index is relisted from containerd while it is open)"
            );
        }
        // Drop what was kept for its calls; they are neither counted nor observed.
        self.calls = Calls::new(recorder);
    }
}

/// One direction's reader.
#[derive(Debug)]
pub struct SideReader {
    side: Side,
    frames: FrameReader,
    hpack: BlockDecoder,
    /// The header block being read: its stream, END_STREAM, and whether it is a PUSH_PROMISE.
    block: Option<(u32, bool, bool)>,
    conversation: Arc<Conversation>,
    /// Calls whose end was in the bytes just read, to settle once they are handed over.
    completed: Vec<u32>,
    /// A response the fault hooks want held before it is handed over.
    hold: Option<String>,
    faults: Faults,
}

impl SideReader {
    /// The reader of `side` of `conversation`.
    pub fn new(side: Side, conversation: Arc<Conversation>, faults: Faults) -> Self {
        Self {
            side,
            frames: match side {
                Side::Client => FrameReader::client(),
                Side::Server => FrameReader::server(),
            },
            hpack: BlockDecoder::new(),
            block: None,
            conversation,
            completed: Vec::new(),
            hold: None,
            faults,
        }
    }

    /// Whether the client's connection preface has been read (true on the server's side, and
    /// once observation stopped for a reason other than a wrong preface).
    pub fn preface_done(&self) -> bool {
        if self.frames.preface_done() {
            return true;
        }
        let s = self.conversation.shared.lock();
        !s.observing && !s.junk
    }

    /// Whether the bytes read so far end between two frames (a frame may be added there).
    /// False once the connection is no longer observed.
    pub fn at_boundary(&self) -> bool {
        self.frames.at_boundary() && self.conversation.observing()
    }

    /// Reads bytes that are about to be relayed.
    pub fn feed(&mut self, chunk: &Bytes) {
        let conversation = self.conversation.clone();
        let mut shared = conversation.shared.lock();
        if !shared.observing {
            return;
        }
        let mut caller_reset = false;
        let mut sink = Sink {
            side: self.side,
            caller_reset: &mut caller_reset,
            hpack: &mut self.hpack,
            block: &mut self.block,
            shared: &mut shared,
            completed: &mut self.completed,
            hold: &mut self.hold,
            faults: &self.faults,
        };
        let frames = &mut self.frames;
        // Whatever goes wrong in the reader must cost the observation of this connection (which
        // the index heals from), never the relay task that copies its bytes.
        let read = std::panic::catch_unwind(AssertUnwindSafe(|| frames.feed(chunk, &mut sink)))
            .unwrap_or(Err(FrameError::Abandoned("the reader panicked")));
        if let Err(e) = read {
            shared.stop_observing(self.side, &e);
            self.completed.clear();
        }
        drop(shared);
        if caller_reset {
            conversation.note_caller_gone();
        }
    }

    /// The conversation this reader belongs to.
    pub fn conversation(&self) -> &Arc<Conversation> {
        &self.conversation
    }

    /// A held response's path, if the bytes just read must wait (fault injection only).
    pub fn take_hold(&mut self) -> Option<String> {
        self.hold.take()
    }

    /// The bytes last fed have been handed to the peer (`handed_over`) or could not be.
    pub fn settle(&mut self, handed_over: bool) {
        if self.completed.is_empty() {
            return;
        }
        let mut shared = self.conversation.shared.lock();
        if !shared.observing {
            self.completed.clear();
            return;
        }
        for id in self.completed.drain(..) {
            shared.calls.settle(id, handed_over);
        }
    }
}

struct Sink<'a> {
    side: Side,
    caller_reset: &'a mut bool,
    hpack: &'a mut BlockDecoder,
    block: &'a mut Option<(u32, bool, bool)>,
    shared: &'a mut Shared,
    completed: &'a mut Vec<u32>,
    hold: &'a mut Option<String>,
    faults: &'a Faults,
}

impl FrameSink for Sink<'_> {
    fn block_start(&mut self, stream: u32, end_stream: bool, promise: bool) {
        *self.block = Some((stream, end_stream, promise));
    }

    fn block_fragment(&mut self, fragment: &[u8]) -> Result<(), FrameError> {
        let allowed = self.shared.table_allowed[self.side.index()];
        Ok(self.hpack.feed(fragment, allowed)?)
    }

    fn block_end(&mut self) -> Result<(), FrameError> {
        let fields = self.hpack.finish()?;
        let Some((stream, end_stream, promise)) = self.block.take() else {
            return Ok(());
        };
        if promise {
            return Ok(());
        }
        if self.shared.list_allowed[self.side.index()].is_some_and(|max| fields.list_size > max) {
            // The receiving peer refuses the stream (a reset the reader sees); the block was
            // still decoded, as the peer decodes it, to keep HPACK in step.
            tracing::debug!(side = ?self.side, stream, size = fields.list_size,
                "header list above the receiving peer's SETTINGS_MAX_HEADER_LIST_SIZE");
        }
        let calls = &mut self.shared.calls;
        match self.side {
            Side::Client => {
                if let Some(path) = fields.path.as_deref()
                    && self.faults.blinds(path)
                {
                    panic!("fault injection: the reader panics on a request to {path}");
                }
                calls.request_headers(stream, fields, end_stream)?
            }
            Side::Server => {
                if self.faults.is_armed()
                    && let Some(path) = calls.path(stream)
                    && self.faults.holds(path)
                {
                    *self.hold = Some(path.to_owned());
                }
                if calls.response_headers(stream, fields, end_stream) {
                    self.completed.push(stream);
                }
            }
        }
        Ok(())
    }

    fn data(
        &mut self,
        stream: u32,
        chunk: &Bytes,
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        let calls = &mut self.shared.calls;
        match self.side {
            Side::Client => calls.request_data(stream, chunk, range, end_stream),
            Side::Server => {
                if calls.response_data(stream, chunk, range, end_stream)? {
                    self.completed.push(stream);
                }
                Ok(())
            }
        }
    }

    fn rst_stream(&mut self, stream: u32, _code: u32) {
        let calls = &mut self.shared.calls;
        match self.side {
            Side::Client => {
                *self.caller_reset = true;
                calls.caller_reset(stream);
            }
            Side::Server => calls.server_reset(stream),
        }
    }

    fn goaway(&mut self, last_stream: u32, code: u32) {
        tracing::debug!(side = ?self.side, last_stream, code, "GOAWAY");
        if self.side == Side::Server {
            self.shared.calls.server_goaway(last_stream);
        }
    }

    fn setting(&mut self, id: u16, value: u32) {
        // What this side announces limits what the other side may send it.
        let encoder = self.side.other().index();
        let value = u64::from(value);
        match id {
            SETTINGS_HEADER_TABLE_SIZE => {
                let t = &mut self.shared.table_allowed[encoder];
                *t = (*t).max(value);
            }
            SETTINGS_MAX_HEADER_LIST_SIZE => {
                let l = &mut self.shared.list_allowed[encoder];
                *l = Some(l.map_or(value, |l| l.max(value)));
            }
            _ => {}
        }
    }
}
