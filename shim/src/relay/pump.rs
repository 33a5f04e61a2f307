//! One direction of a relayed connection: read what arrives, write it on, unchanged and without
//! waiting for a frame or message to complete, and let the side reader look at it (see
//! [`Pump::pass_on`] for when it looks).
//!
//! Reads go into one buffer per direction, made at the first read and reused for every chunk:
//! the reader copies out the few body parts it keeps, so nothing holds a chunk once it is
//! relayed. Sockets are waited on for reading alone (see `socket.rs`).
//!
//! The reader's work per chunk is linear in the chunk (HPACK included, whatever the header
//! blocks say), and each direction yields to the runtime after a read that filled its buffer
//! (a shorter read drained the socket, and the next read waits for the runtime anyway), so a
//! connection that sends as fast as it can delays another connection's bytes by at most one
//! chunk's worth of reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus::IntCounter;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fault::Faults;
use crate::h2read::{graceful_goaway, only_upkeep};
use crate::observe::SideReader;

use super::socket::{Socket, Writer};

/// The largest chunk after which the relay lets the peer run first (see
/// [`Pump::lets_the_peer_run`]): one HTTP/2 frame of the default size. A yield gives the peer
/// this CPU until it blocks or its time slice ends. After a small request or answer the peer's
/// work is short and it then waits again; in the middle of a large answer it has much to do,
/// and the relay's next read would wait behind it.
const SMALL_CHUNK: usize = 16 << 10;

/// When either direction last moved bytes, for "the connection is quiet" at shutdown.
#[derive(Debug)]
pub(super) struct Activity {
    base: Instant,
    last_us: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            last_us: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let us = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_us.store(us, Ordering::Relaxed);
    }

    /// Time since the last bytes moved.
    pub(super) fn quiet_for(&self) -> std::time::Duration {
        let last = std::time::Duration::from_micros(self.last_us.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }
}

/// One direction: the socket it reads, the writer to the other socket, and what it counts
/// into.
pub(super) struct Pump {
    pub(super) src: Arc<Socket>,
    pub(super) dst: Writer,
    pub(super) reader: SideReader,
    pub(super) bytes: IntCounter,
    pub(super) activity: Arc<Activity>,
    pub(super) buffer: usize,
}

/// How the client-to-containerd direction ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum UpEnd {
    /// The client closed (or its socket failed); containerd was told with a FIN.
    ClientClosed,
    /// containerd's socket would take no more.
    UpstreamClosed,
    /// No connection preface before the deadline.
    HandshakeTimeout,
}

impl Pump {
    /// Writes `chunk` on and has the side reader read it. The reader reads after the write when
    /// the socket takes the whole chunk at once (nearly always): its work — HPACK, the calls'
    /// bookkeeping, the repeat digest of a large List — then overlaps the peer's handling of the
    /// bytes instead of delaying them. When the write must wait, the reader reads first: the
    /// other direction runs meanwhile, and it must never see an answer to a request, or a reset
    /// of an answer, that the reader has not read yet.
    ///
    /// `drained`: the read that gave `chunk` emptied the socket, so the peer now has all there
    /// is to act on (see [`Pump::lets_the_peer_run`]).
    async fn pass_on(&mut self, chunk: &[u8], drained: bool) -> std::io::Result<()> {
        let written = match self.dst.try_write(chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                self.reader.feed(chunk);
                return Err(e);
            }
        };
        if written == chunk.len() {
            self.dst.disarm();
            if drained && chunk.len() <= SMALL_CHUNK {
                self.lets_the_peer_run(chunk);
            }
        }
        self.reader.feed(chunk);
        if written < chunk.len() {
            self.dst.write_rest(&chunk[written..]).await?;
        }
        Ok(())
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
    fn lets_the_peer_run(&self, chunk: &[u8]) {
        if matches!(self.reader.calls_in_flight(), Some(0 | 1))
            && !(only_upkeep(chunk) && self.reader.at_boundary())
        {
            std::thread::yield_now();
        }
    }

    /// Reads what is there into `buf` (made at the first read); the bytes read and whether
    /// they filled it (so more may be waiting: see [`Pump::containerd_to_client`]).
    async fn read(&mut self, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
        if buf.is_empty() {
            // Zeroed by the allocator (fresh pages are zero already), not written here: an idle
            // connection's buffer stays untouched memory until reads fill it.
            *buf = vec![0; self.buffer.max(1)];
        }
        let n = self.src.read(buf).await?;
        Ok((n, n >= buf.len()))
    }

    /// Client to containerd, until either side ends or the handshake deadline passes without a
    /// connection preface.
    pub(super) async fn client_to_containerd(mut self, handshake_deadline: Instant) -> UpEnd {
        let mut buf = Vec::new();
        loop {
            let read = if self.reader.preface_done() {
                self.read(&mut buf).await
            } else {
                match tokio::time::timeout_at(handshake_deadline, self.read(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => return UpEnd::HandshakeTimeout,
                }
            };
            let (n, full) = match read {
                Ok((0, _)) | Err(_) => {
                    self.reader.conversation().note_caller_gone();
                    // As the client's own FIN would: containerd ends the connection, cancelling
                    // what is still in flight, and may still answer what it finished.
                    let _ = self.dst.shutdown();
                    return UpEnd::ClientClosed;
                }
                Ok(read) => read,
            };
            let chunk = &buf[..n];
            self.activity.touch();
            self.bytes.inc_by(n as u64);
            if self.pass_on(chunk, !full).await.is_err() {
                return UpEnd::UpstreamClosed;
            }
            self.reader.settle(true);
            if full {
                // A client writing megabytes of header blocks keeps this loop busy with one
                // full read after another; the other connections go first between them.
                tokio::task::yield_now().await;
            }
        }
    }

    /// containerd to client, until containerd closes. Once `stop` fires, a graceful GOAWAY is
    /// added at the next frame boundary (`goaway_sent` tells the connection). If the client has
    /// gone, containerd's answers are still read (not written) so that their outcome is known.
    pub(super) async fn containerd_to_client(
        mut self,
        faults: Faults,
        mut stop: watch::Receiver<bool>,
        goaway_sent: Arc<AtomicBool>,
    ) {
        let mut buf = Vec::new();
        let mut client_gone = false;
        let mut want_goaway = false;
        // One wait for the whole connection, made once: a `changed()` made afresh at every read
        // would register and unregister a waiter each time. It ends when shutdown begins (or
        // its sender is gone), and is not polled again after.
        let stopping = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopping);
        loop {
            if want_goaway
                && !client_gone
                && !goaway_sent.load(Ordering::Relaxed)
                && self.reader.at_boundary()
            {
                client_gone = self.dst.write_all(&graceful_goaway()).await.is_err();
                goaway_sent.store(true, Ordering::Relaxed);
            }
            let read = tokio::select! {
                r = self.read(&mut buf) => r,
                () = &mut stopping, if !want_goaway => {
                    want_goaway = true;
                    continue;
                }
            };
            let (n, full) = match read {
                Ok((n, full)) if n > 0 => (n, full),
                _ => break,
            };
            let chunk = &buf[..n];
            self.activity.touch();
            self.bytes.inc_by(n as u64);
            if faults.is_armed() {
                // A test that holds a response must read it before it goes on.
                self.reader.feed(chunk);
                if let Some(path) = self.reader.take_hold() {
                    // Until released, or until the caller gives up on it (its deadline passed):
                    // what a response stuck between containerd and kubelet looks like.
                    let conversation = self.reader.conversation().clone();
                    tokio::select! {
                        _ = faults.before_response(&path) => {}
                        _ = conversation.caller_gone() => {}
                    }
                }
                if !client_gone {
                    client_gone = self.dst.write_all(chunk).await.is_err();
                }
            } else if client_gone {
                self.reader.feed(chunk);
            } else {
                client_gone = self.pass_on(chunk, !full).await.is_err();
            }
            self.reader.settle(!client_gone);
            if full {
                // A multi-MiB answer keeps this loop busy with one full read after another, and
                // a read that fills the buffer leaves the socket's readiness set, so the
                // current-thread runtime would run the other direction — which carries the
                // client's WINDOW_UPDATEs that containerd waits for once its window is spent —
                // only when this task's budget ran out. Yielding lets the runtime poll its I/O
                // and relay those first. A read that did not fill the buffer drained the socket:
                // the next read waits on the runtime's I/O polling anyway, and a yield there
                // would cost an extra wake-up and poll for every answer of a few KiB or more.
                tokio::task::yield_now().await;
            }
        }
        if !client_gone {
            let _ = self.dst.shutdown();
        }
    }
}
