//! One relayed connection as the observer reads it: the two directions' HTTP/2 readers
//! (`h2read`) report streams, and this turns them into CRI calls (`calls.rs`). The two sides
//! share one [`Conversation`]: the client's side opens calls, the server's side ends them.
//!
//! If either side cannot be followed (junk, what a peer would refuse too, a bound of the calls'
//! bookkeeping, a bug), the connection stops being observed: logged once, counted in
//! `podward_shim_observe_errors_total`, its bytes keep flowing unchanged, and the index is
//! healed by relisting from containerd while it stays unobserved (`heal.rs`).

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::calls::{Calls, Recorder};
use super::grpc_headers::{Fields, WANTED};
use crate::fault::Faults;
use crate::h2read::{DirectionReader, FrameError, HeaderBlock, HeaderLimits, Side, StreamEvents};

/// What both sides of one connection know together.
#[derive(Debug)]
pub struct Conversation {
    shared: Mutex<Shared>,
    /// Set when the client resets a stream or leaves (a held response stops waiting), taken by
    /// [`Conversation::take_caller_gone`].
    caller_gone: AtomicBool,
}

#[derive(Debug)]
struct Shared {
    observing: bool,
    /// Observation stopped because the client's first bytes were not an HTTP/2 preface.
    junk: bool,
    calls: Calls,
    limits: HeaderLimits,
}

impl Conversation {
    /// A new connection's conversation.
    pub fn new(recorder: Arc<Recorder>) -> Arc<Self> {
        Arc::new(Self {
            shared: Mutex::new(Shared {
                observing: true,
                junk: false,
                calls: Calls::new(recorder),
                limits: HeaderLimits::default(),
            }),
            caller_gone: AtomicBool::new(false),
        })
    }

    /// The client reset a stream or left.
    pub fn note_caller_gone(&self) {
        self.caller_gone.store(true, Ordering::Release);
    }

    /// Whether [`note_caller_gone`](Self::note_caller_gone) was called since the last time this
    /// was asked.
    pub fn take_caller_gone(&self) -> bool {
        self.caller_gone.swap(false, Ordering::AcqRel)
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

    /// The latest deadline of the calls still open (`None`: none open with a deadline, or the
    /// connection is not observed).
    pub fn latest_deadline(&self) -> Option<std::time::Instant> {
        let s = self.shared.lock();
        if s.observing {
            s.calls
                .latest_deadline()
                .map(tokio::time::Instant::into_std)
        } else {
            None
        }
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

/// One direction's observation: its HTTP/2 reader and what its streams mean.
#[derive(Debug)]
pub struct SideReader {
    reader: DirectionReader,
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
            reader: DirectionReader::new(side, WANTED),
            conversation,
            completed: Vec::new(),
            hold: None,
            faults,
        }
    }

    /// Whether the client's connection preface has been read (true on the server's side, and
    /// once observation stopped for a reason other than a wrong preface).
    pub fn preface_done(&self) -> bool {
        if self.reader.preface_done() {
            return true;
        }
        let s = self.conversation.shared.lock();
        !s.observing && !s.junk
    }

    /// Whether the bytes read so far end between two frames (a frame may be added there).
    /// False once the connection is no longer observed.
    pub fn at_boundary(&self) -> bool {
        self.reader.at_boundary() && self.conversation.observing()
    }

    /// Reads bytes that are about to be relayed.
    pub fn feed(&mut self, chunk: &[u8]) {
        let conversation = self.conversation.clone();
        let mut shared = conversation.shared.lock();
        if !shared.observing {
            return;
        }
        let side = self.reader.side();
        let Shared { calls, limits, .. } = &mut *shared;
        let mut caller_reset = false;
        let mut events = CallEvents {
            side,
            caller_reset: &mut caller_reset,
            calls,
            completed: &mut self.completed,
            hold: &mut self.hold,
            faults: &self.faults,
        };
        let reader = &mut self.reader;
        // Whatever goes wrong in the reader must cost the observation of this connection (which
        // the index heals from), never the relay task that copies its bytes.
        let read =
            std::panic::catch_unwind(AssertUnwindSafe(|| reader.feed(chunk, limits, &mut events)))
                .unwrap_or(Err(FrameError::Abandoned("the reader panicked")));
        if let Err(e) = read {
            shared.stop_observing(side, &e);
            self.completed.clear();
        }
        drop(shared);
        if caller_reset {
            conversation.note_caller_gone();
        }
    }

    /// The connection's calls in flight; None once it is no longer observed.
    pub fn calls_in_flight(&self) -> Option<usize> {
        self.conversation.active_streams()
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

/// One direction's streams as CRI calls: the client's side opens them, the server's ends them.
struct CallEvents<'a> {
    side: Side,
    caller_reset: &'a mut bool,
    calls: &'a mut Calls,
    completed: &'a mut Vec<u32>,
    hold: &'a mut Option<String>,
    faults: &'a Faults,
}

impl StreamEvents for CallEvents<'_> {
    fn headers(
        &mut self,
        stream: u32,
        block: HeaderBlock,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        let fields = Fields::of(&block);
        let calls = &mut *self.calls;
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
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        let calls = &mut *self.calls;
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

    fn reset(&mut self, stream: u32, _code: u32) {
        match self.side {
            Side::Client => {
                *self.caller_reset = true;
                self.calls.caller_reset(stream);
            }
            Side::Server => self.calls.server_reset(stream),
        }
    }

    fn goaway(&mut self, last_stream: u32, _code: u32) {
        if self.side == Side::Server {
            self.calls.server_goaway(last_stream);
        }
    }
}
