//! The passive HTTP/2 reader beside the relay.
//!
//! Each direction of a relayed connection has a [`SideReader`]: it follows the framing of the
//! bytes the relay has copied (never the other way round: the relay does not wait for it),
//! decodes every header block with HPACK, maps stream IDs to `:path`, keeps the DATA of the
//! watched methods, and sees trailers, RST_STREAM and GOAWAY. The two sides of a connection
//! share one [`Conversation`]: the client's side opens calls, the server's side ends them.
//!
//! If either side cannot follow the bytes (junk, an HPACK error, a flood past the caps), the
//! connection stops being observed: logged once, counted in
//! `podward_shim_observe_errors_total`, and its bytes keep flowing unchanged.

mod calls;
mod fields;
mod frames;

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

pub use calls::Recorder;
pub use frames::FrameError;
pub(crate) use frames::{
    FrameReader, FrameSink, goaway_frame, graceful_goaway, settings_frame, trailers_only,
};

/// Length of the client's HTTP/2 connection preface.
pub const PREFACE_LEN: usize = frames::PREFACE.len();

use crate::fault::Faults;
use calls::Calls;
use fields::HeaderDecoder;

/// Which peer wrote the bytes a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (kubelet): requests.
    Client,
    /// The server (containerd): responses.
    Server,
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
}

impl Conversation {
    /// A new connection's conversation.
    pub fn new(recorder: Arc<Recorder>) -> Arc<Self> {
        Arc::new(Self {
            shared: Mutex::new(Shared {
                observing: true,
                junk: false,
                calls: Calls::new(recorder),
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

impl Shared {
    fn stop_observing(&mut self, side: Side, e: &FrameError) {
        self.observing = false;
        self.junk = *e == FrameError::Preface;
        let recorder = self.calls.recorder();
        recorder.metrics().observe_errors.inc();
        tracing::warn!(
            ?side,
            error = %e,
            "cannot follow this CRI connection's HTTP/2; it is relayed unchanged but no longer \
             observed (the index catches up on the next List)"
        );
        // Drop what was kept for its calls; they are neither counted nor observed.
        self.calls = Calls::new(recorder);
    }
}

/// One direction's reader.
#[derive(Debug)]
pub struct SideReader {
    side: Side,
    frames: FrameReader,
    hpack: HeaderDecoder,
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
            hpack: HeaderDecoder::new(),
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
            calls: &mut shared.calls,
            completed: &mut self.completed,
            hold: &mut self.hold,
            faults: &self.faults,
        };
        if let Err(e) = self.frames.feed(chunk, &mut sink) {
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
    hpack: &'a mut HeaderDecoder,
    calls: &'a mut Calls,
    completed: &'a mut Vec<u32>,
    hold: &'a mut Option<String>,
    faults: &'a Faults,
}

impl FrameSink for Sink<'_> {
    fn headers(&mut self, stream: u32, end_stream: bool, block: &[u8]) -> Result<(), FrameError> {
        let fields = self.hpack.decode(block)?;
        match self.side {
            Side::Client => self.calls.request_headers(stream, fields, end_stream)?,
            Side::Server => {
                if self.faults.is_armed()
                    && let Some(path) = self.calls.path(stream)
                    && self.faults.holds(path)
                {
                    *self.hold = Some(path.to_owned());
                }
                if self.calls.response_headers(stream, fields, end_stream) {
                    self.completed.push(stream);
                }
            }
        }
        Ok(())
    }

    fn push_promise(&mut self, block: &[u8]) -> Result<(), FrameError> {
        self.hpack.decode(block).map(drop)
    }

    fn data(
        &mut self,
        stream: u32,
        chunk: &Bytes,
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        match self.side {
            Side::Client => self.calls.request_data(stream, chunk, range, end_stream),
            Side::Server => {
                if self.calls.response_data(stream, chunk, range, end_stream)? {
                    self.completed.push(stream);
                }
                Ok(())
            }
        }
    }

    fn rst_stream(&mut self, stream: u32, _code: u32) {
        match self.side {
            Side::Client => {
                *self.caller_reset = true;
                self.calls.caller_reset(stream);
            }
            Side::Server => self.calls.server_reset(stream),
        }
    }

    fn goaway(&mut self, last_stream: u32, code: u32) {
        tracing::debug!(side = ?self.side, last_stream, code, "GOAWAY");
        if self.side == Side::Server {
            self.calls.server_goaway(last_stream);
        }
    }
}
