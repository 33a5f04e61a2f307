//! One relayed connection as the observer reads it: the two directions' HTTP/2 readers
//! (`h2read`) report streams, and this turns them into CRI calls (`calls.rs`). The two sides
//! read into one [`Conversation`], owned by the connection's thread and lent to each side in
//! turn: the client's side opens calls, the server's side ends them.
//!
//! If either side cannot be followed (junk, what a peer would refuse too, a bound of the calls'
//! bookkeeping, a bug), the connection stops being observed: logged once, counted in
//! `podward_shim_observe_errors_total`, its bytes keep flowing unchanged, and the index is
//! healed by relisting from containerd while it stays unobserved (`runtime/heal.rs`).

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::calls::Calls;
use super::grpc_headers::{Fields, WANTED};
use super::recorder::Recorder;
use crate::fault::Faults;
use crate::h2read::{DirectionReader, FrameError, HeaderBlock, HeaderLimits, Side, StreamEvents};

/// What both sides of one connection know together. Owned by the connection's relay loop,
/// which lends it to each side's reader in turn.
pub struct Conversation {
    state: State,
    recorder: Arc<Recorder>,
    /// Set when the client resets a stream or leaves (a held response stops waiting), taken by
    /// [`Conversation::take_caller_gone`].
    caller_gone: bool,
}

/// Whether a connection is followed, and why not once it is not.
#[derive(Debug)]
enum State {
    /// Both sides are read: the calls open on the connection and the header limits its peers
    /// agreed on.
    Observing { calls: Calls, limits: HeaderLimits },
    /// The client's first bytes were not an HTTP/2 preface: no CRI call can be made on it,
    /// nothing to heal.
    NotHttp2,
    /// A side could not be followed: the index is relisted while the connection is open.
    Lost,
}

impl Conversation {
    /// A new connection's conversation.
    pub fn new(recorder: Arc<Recorder>) -> Self {
        Self {
            state: State::Observing {
                calls: Calls::new(recorder.clone()),
                limits: HeaderLimits::default(),
            },
            recorder,
            caller_gone: false,
        }
    }

    /// The client reset a stream or left.
    pub fn note_caller_gone(&mut self) {
        self.caller_gone = true;
    }

    /// Whether [`note_caller_gone`](Self::note_caller_gone) was called since the last time this
    /// was asked.
    pub fn take_caller_gone(&mut self) -> bool {
        std::mem::take(&mut self.caller_gone)
    }

    /// Whether the connection is still being read.
    pub fn observing(&self) -> bool {
        matches!(self.state, State::Observing { .. })
    }

    /// Open streams (None when the connection is no longer observed: unknown).
    pub fn active_streams(&self) -> Option<usize> {
        match &self.state {
            State::Observing { calls, .. } => Some(calls.active()),
            State::NotHttp2 | State::Lost => None,
        }
    }

    /// The latest deadline of the calls still open (`None`: none open with a deadline, or the
    /// connection is not observed).
    pub fn latest_deadline(&self) -> Option<std::time::Instant> {
        match &self.state {
            State::Observing { calls, .. } => {
                calls.latest_deadline().map(tokio::time::Instant::into_std)
            }
            State::NotHttp2 | State::Lost => None,
        }
    }

    /// The connection ended; `client_left` says whose side closed first.
    pub fn close(&mut self, client_left: bool) {
        if let State::Observing { calls, .. } = &mut self.state {
            calls.close(client_left);
        }
    }

    /// Stops observing after `side` could not be followed: what was kept for the open calls is
    /// dropped; they are neither counted nor observed.
    fn stop_observing(&mut self, side: Side, e: &FrameError) {
        self.recorder.metrics().observe_errors.inc();
        if *e == FrameError::Preface {
            self.state = State::NotHttp2;
            tracing::debug!(
                ?side,
                "not an HTTP/2 connection; relayed unchanged, not observed"
            );
        } else {
            self.state = State::Lost;
            self.recorder.blindness().connection_lost();
            tracing::warn!(
                ?side,
                error = %e,
                "cannot follow this CRI connection's HTTP/2; it is relayed unchanged but no \
                 longer observed (the index is relisted from containerd while it is open)"
            );
        }
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("state", &self.state)
            .field("caller_gone", &self.caller_gone)
            .finish_non_exhaustive()
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        if matches!(self.state, State::Lost) {
            self.recorder.blindness().connection_closed();
        }
    }
}

/// One direction's observation: its HTTP/2 reader and what its streams mean, read into the
/// connection's [`Conversation`].
#[derive(Debug)]
pub struct SideReader {
    reader: DirectionReader,
    /// Calls whose end was in the bytes just read, to settle once they are handed over.
    completed: Vec<u32>,
    /// A response the fault hooks want held before it is handed over.
    hold: Option<String>,
    faults: Faults,
}

impl SideReader {
    /// The reader of `side` of a connection.
    pub fn new(side: Side, faults: Faults) -> Self {
        Self {
            reader: DirectionReader::new(side, WANTED),
            completed: Vec::new(),
            hold: None,
            faults,
        }
    }

    /// Whether the client's connection preface has been read (true on the server's side, and
    /// once observation stopped for a reason other than a wrong preface).
    pub fn preface_done(&self, conversation: &Conversation) -> bool {
        self.reader.preface_done() || matches!(conversation.state, State::Lost)
    }

    /// Whether the bytes read so far end between two frames (a frame may be added there).
    /// False once the connection is no longer observed.
    pub fn at_boundary(&self, conversation: &Conversation) -> bool {
        self.reader.at_boundary() && conversation.observing()
    }

    /// Reads bytes that are about to be relayed.
    pub fn feed(&mut self, conversation: &mut Conversation, chunk: &[u8]) {
        let State::Observing { calls, limits } = &mut conversation.state else {
            return;
        };
        let side = self.reader.side();
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
        // the index heals from), never the relay thread that copies its bytes.
        let read =
            std::panic::catch_unwind(AssertUnwindSafe(|| reader.feed(chunk, limits, &mut events)))
                .unwrap_or(Err(FrameError::Abandoned("the reader panicked")));
        if let Err(e) = read {
            conversation.stop_observing(side, &e);
            self.completed.clear();
        }
        if caller_reset {
            conversation.note_caller_gone();
        }
    }

    /// A held response's path, if the bytes just read must wait (fault injection only).
    pub fn take_hold(&mut self) -> Option<String> {
        self.hold.take()
    }

    /// The bytes last fed have been handed to the peer (`handed_over`) or could not be.
    pub fn settle(&mut self, conversation: &mut Conversation, handed_over: bool) {
        if self.completed.is_empty() {
            return;
        }
        let State::Observing { calls, .. } = &mut conversation.state else {
            self.completed.clear();
            return;
        };
        for id in self.completed.drain(..) {
            calls.settle(id, handed_over);
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
