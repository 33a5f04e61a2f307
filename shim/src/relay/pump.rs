//! One direction of a relayed connection: read what arrives, write it on, unchanged and without
//! waiting for a frame or message to complete, and let the side reader look at it (see
//! [`Pump::pass_on`] for when it looks).
//!
//! Both sockets are non-blocking and the connection's thread waits in `poll(2)` (see
//! `connection.rs`). Reads go into one buffer per direction, made at the first read and reused
//! for every chunk: the reader copies out the few body parts it keeps, so nothing holds a chunk
//! once it is relayed. A chunk the destination would not take whole stays in the buffer
//! (*pending*), and the direction reads nothing more until it has been written: a slow reader
//! holds up its own connection's direction, and the bytes it has not taken are bounded by the
//! buffer.

use std::io::{self, Read, Write};
use std::ops::Range;
use std::os::unix::net::UnixStream;

use prometheus::IntCounter;

use crate::fault::{Faults, Hold};
use crate::h2read::only_upkeep;
use crate::observe::{Conversation, SideReader};

/// The largest chunk after which the relay lets the peer run first (see
/// [`Pump::lets_the_peer_run`]): one HTTP/2 frame of the default size. A yield gives the peer
/// this CPU until it blocks or its time slice ends. After a small request or answer the peer's
/// work is short and it then waits again; in the middle of a large answer it has much to do,
/// and the relay's next read would wait behind it.
const SMALL_CHUNK: usize = 16 << 10;

/// What a read from the source gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Got {
    /// `n` bytes are in the buffer; `drained` when the read left room (it took all there was).
    Bytes { n: usize, drained: bool },
    /// Nothing to read now.
    Empty,
    /// The source closed its side, or failed.
    Ended,
}

/// One direction: its buffer, the bytes in it still to be written, and its side reader.
pub(super) struct Pump {
    reader: SideReader,
    bytes: IntCounter,
    /// The buffer's size once made.
    size: usize,
    buf: Vec<u8>,
    /// Bytes of `buf` read (or queued) and not yet written: the destination was full.
    pending: Range<usize>,
    /// The pending bytes are the rest of a chunk whose finished calls are settled once they
    /// have been handed over.
    unsettled: bool,
    /// A response held back by a fault (test builds): the pending bytes wait for it.
    held: Option<Hold>,
}

impl Pump {
    /// A direction read `size` bytes at a time, read by `reader`, its bytes counted in `bytes`.
    pub(super) fn new(reader: SideReader, bytes: IntCounter, size: usize) -> Self {
        Self {
            reader,
            bytes,
            size: size.max(1),
            buf: Vec::new(),
            pending: 0..0,
            unsettled: false,
            held: None,
        }
    }

    /// The side reader.
    pub(super) fn reader(&self) -> &SideReader {
        &self.reader
    }

    /// Whether the direction may read: all it read has been written on.
    pub(super) fn wants_read(&self) -> bool {
        self.pending.is_empty() && self.held.is_none()
    }

    /// Whether the direction waits for room in its destination.
    pub(super) fn wants_write(&self) -> bool {
        !self.pending.is_empty() && self.held.is_none()
    }

    /// Whether a held response waits (checked on a short tick: see `connection.rs`).
    pub(super) fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// Lets a held response go once its hold is over, or once the caller reset a stream or
    /// left (its deadline passed: what a response stuck between containerd and kubelet looks
    /// like).
    pub(super) fn check_hold(&mut self, conversation: &mut Conversation) {
        if self
            .held
            .as_ref()
            .is_some_and(|h| h.is_over() || conversation.take_caller_gone())
        {
            self.held = None;
        }
    }

    /// Reads what `src` has into the buffer (made at the first read).
    pub(super) fn read(&mut self, mut src: &UnixStream) -> Got {
        debug_assert!(self.wants_read());
        if self.buf.is_empty() {
            // Zeroed by the allocator (fresh pages are zero already), not written here: an idle
            // connection's buffer stays untouched memory until reads fill it.
            self.buf = vec![0; self.size];
        }
        loop {
            return match src.read(&mut self.buf) {
                Ok(0) => Got::Ended,
                Ok(n) => {
                    self.bytes.inc_by(n as u64);
                    Got::Bytes {
                        n,
                        drained: n < self.buf.len(),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Got::Empty,
                Err(_) => Got::Ended,
            };
        }
    }

    /// Writes the `n` bytes just read on to `dst` and has the side reader read them. The reader
    /// reads after the write when the socket takes the whole chunk at once (nearly always): its
    /// work — HPACK, the calls' bookkeeping, the repeat digest of a large List — then overlaps
    /// the peer's handling of the bytes instead of delaying them. When the write must wait, the
    /// reader reads first: the other direction runs meanwhile, and it must never see an answer
    /// to a request, or a reset of an answer, that the reader has not read yet.
    ///
    /// `drained`: the read emptied the socket, so the peer now has all there is to act on (see
    /// [`Pump::lets_the_peer_run`]).
    pub(super) fn pass_on(
        &mut self,
        conversation: &mut Conversation,
        dst: &UnixStream,
        n: usize,
        drained: bool,
    ) -> io::Result<()> {
        let chunk = &self.buf[..n];
        let written = match write_some(dst, chunk) {
            Ok(w) => w,
            Err(e) => {
                self.reader.feed(conversation, chunk);
                self.reader.settle(conversation, false);
                return Err(e);
            }
        };
        if written == n && drained && n <= SMALL_CHUNK {
            self.lets_the_peer_run(conversation, chunk);
        }
        self.reader.feed(conversation, chunk);
        self.after_write(conversation, written, n);
        Ok(())
    }

    /// As [`Pump::pass_on`] with fault hooks armed (test builds): the reader reads first, and a
    /// response a hold applies to is kept until the hold is over.
    pub(super) fn pass_on_checked(
        &mut self,
        conversation: &mut Conversation,
        dst: &UnixStream,
        n: usize,
        faults: &Faults,
    ) -> io::Result<()> {
        self.reader.feed(conversation, &self.buf[..n]);
        if let Some(path) = self.reader.take_hold() {
            self.held = faults.hold_response(&path);
            if self.held.is_some() {
                self.pending = 0..n;
                self.unsettled = true;
                return Ok(());
            }
        }
        match write_some(dst, &self.buf[..n]) {
            Ok(written) => {
                self.after_write(conversation, written, n);
                Ok(())
            }
            Err(e) => {
                self.reader.settle(conversation, false);
                Err(e)
            }
        }
    }

    /// The reader reads the `n` bytes just read, which go nowhere (the client has gone; their
    /// outcome is still wanted).
    pub(super) fn discard(&mut self, conversation: &mut Conversation, n: usize) {
        self.reader.feed(conversation, &self.buf[..n]);
        self.reader.settle(conversation, false);
    }

    /// `written` of the `n` bytes fed went out: the rest is pending, or the chunk's calls are
    /// settled.
    fn after_write(&mut self, conversation: &mut Conversation, written: usize, n: usize) {
        if written < n {
            self.pending = written..n;
            self.unsettled = true;
        } else {
            self.reader.settle(conversation, true);
        }
    }

    /// Writes what `dst` takes of the pending bytes.
    pub(super) fn flush(
        &mut self,
        conversation: &mut Conversation,
        dst: &UnixStream,
    ) -> io::Result<()> {
        match write_some(dst, &self.buf[self.pending.clone()]) {
            Ok(written) => {
                self.pending.start += written;
                if self.pending.is_empty() {
                    self.pending = 0..0;
                    self.settle(conversation, true);
                }
                Ok(())
            }
            Err(e) => {
                self.pending = 0..0;
                self.settle(conversation, false);
                Err(e)
            }
        }
    }

    /// Drops what is pending (its destination is gone).
    pub(super) fn drop_pending(&mut self, conversation: &mut Conversation) {
        if !self.pending.is_empty() {
            self.pending = 0..0;
            self.held = None;
            self.settle(conversation, false);
        }
    }

    fn settle(&mut self, conversation: &mut Conversation, handed_over: bool) {
        if std::mem::take(&mut self.unsettled) {
            self.reader.settle(conversation, handed_over);
        }
    }

    /// Queues `frame` (a frame of the relay's own, added at a frame boundary) and writes what
    /// `dst` takes of it. Only while nothing is pending.
    pub(super) fn insert(
        &mut self,
        conversation: &mut Conversation,
        dst: &UnixStream,
        frame: &[u8],
    ) -> io::Result<()> {
        debug_assert!(self.pending.is_empty());
        if self.buf.len() < frame.len() {
            self.buf.resize(frame.len().max(self.size), 0);
        }
        self.buf[..frame.len()].copy_from_slice(frame);
        self.pending = 0..frame.len();
        self.flush(conversation, dst)
    }

    /// Offers this thread's CPU to the peer just written to, before the reader's work, when the
    /// connection has at most one call in flight (kubelet's calls one after another) and the
    /// chunk was a small one (see [`SMALL_CHUNK`]).
    ///
    /// A Unix socket's write wakes its reader with a synchronous wake-up, which lets the
    /// scheduler put the peer (containerd, or the client) on this CPU, expecting the writer to
    /// sleep now, as a plain relay does. The side reader's work would then run first while the
    /// peer waits for it: measured, that wait was all the latency the shim added over a bare
    /// relay at one call at a time (docs/benchmarks.md, Shim). `sched_yield` lets the peer go
    /// first; when nothing else is runnable here it returns at once. With several calls in
    /// flight the relay is about throughput, not one call's wait, and a yield per read would
    /// only add switches.
    ///
    /// Nor after a chunk of connection upkeep only (window updates, pings, settings), which
    /// gives the peer nothing to work on: during a large answer the client's window updates
    /// would otherwise give this CPU away, and hold up the relay, several times per answer.
    fn lets_the_peer_run(&self, conversation: &Conversation, chunk: &[u8]) {
        if matches!(conversation.active_streams(), Some(0 | 1))
            && !(only_upkeep(chunk) && self.reader.at_boundary(conversation))
        {
            std::thread::yield_now();
        }
    }
}

/// Writes what `dst` takes of `buf` now (0 when it takes nothing).
fn write_some(mut dst: &UnixStream, buf: &[u8]) -> io::Result<usize> {
    loop {
        return match dst.write(buf) {
            Ok(0) if !buf.is_empty() => Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        };
    }
}

#[cfg(test)]
mod tests;
