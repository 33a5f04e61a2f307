//! The connection threads: one per relayed connection, each blocking in `poll(2)` on its two
//! sockets, started by the accept loop and stopped by one signal shared by all.
//!
//! Why threads and not the runtime: at one call at a time (kubelet's way) every byte the relay
//! moves waits for the thread that copies it to wake. A thread blocked in `poll` on its own two
//! sockets runs the copy straight from the kernel's wake-up; on the async runtime the same
//! wake-up first goes through the runtime's event loop and task scheduling, and that was what
//! still separated the shim from a plain relay such as socat (docs/benchmarks.md, Shim). A
//! thread per connection also bounds what one connection's reading costs the others: the
//! kernel's scheduler shares the CPUs among them, whatever one client sends.
//!
//! Threads are bounded (`--max-connections`, [`MAX_CONNECTIONS`] by default); past the bound, a
//! client is answered `UNAVAILABLE` as when containerd is away, and its next dial is tried
//! afresh. The stop signal is a pipe
//! whose write end is closed at shutdown: every connection's `poll` sees it hang up at once.

use std::cell::Cell;
use std::io::{PipeReader, PipeWriter};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::settings::Relay;
use super::{connection, unavailable};

/// The default bound on connections relayed at once (`--max-connections`). kubelet keeps one or
/// two; crictl and other tools open one per command. A client beyond the bound is answered
/// `UNAVAILABLE`.
pub const MAX_CONNECTIONS: usize = 512;

/// A connection thread's stack. The relay's work is a copy loop and the side reader, neither
/// of which recurses; the stack's pages become resident only as they are used.
const STACK: usize = 512 << 10;

/// The relay's connection threads.
#[derive(Debug)]
pub(super) struct Threads {
    live: Arc<Live>,
    stop: Arc<PipeReader>,
    /// Closed at shutdown: the stop signal.
    stopper: Option<PipeWriter>,
    /// The last connection was refused: the bound is logged once each time it is reached, not
    /// for every client a storm of connections brings.
    refusing: Cell<bool>,
}

/// How many connection threads run, and a wake-up for each that ends.
#[derive(Debug, Default)]
struct Live {
    count: AtomicUsize,
    ended: Notify,
}

/// One running connection thread; counted out when dropped.
struct Running(Arc<Live>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_one();
    }
}

/// Keeps `podward_shim_connections` equal to the open connections.
struct Open(prometheus::IntGauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Threads {
    /// No threads yet, and the stop signal made.
    pub(super) fn new() -> std::io::Result<Self> {
        let (stop, stopper) = std::io::pipe()?;
        Ok(Self {
            live: Arc::default(),
            stop: Arc::new(stop),
            stopper: Some(stopper),
            refusing: Cell::new(false),
        })
    }

    /// Relays `client`, just accepted, on a thread of its own (or answers it `UNAVAILABLE`
    /// when `relay.max_connections` are relayed already).
    pub(super) fn start(&self, relay: &Arc<Relay>, client: tokio::net::UnixStream) {
        // The client's preface is due this long after the accept, whoever answers it.
        let handshake_deadline = Instant::now() + relay.handshake_timeout;
        let metrics = relay.recorder.metrics();
        metrics.connections.inc();
        let open = Open(metrics.connections.clone());
        let max = relay.max_connections;
        if self.live.count.load(Ordering::Acquire) >= max {
            metrics.connections_refused.inc();
            if !self.refusing.replace(true) {
                tracing::warn!(
                    max,
                    "CRI socket: --max-connections reached; new connections are answered \
                     UNAVAILABLE until one closes (podward_shim_connections_refused_total counts \
                     them)"
                );
            }
            let message = format!(
                "podward-shim: {max} CRI connections already relayed (--max-connections {max})"
            );
            tokio::spawn(async move {
                let _open = open;
                let deadline = tokio::time::Instant::from_std(handshake_deadline);
                unavailable::answer(client, deadline, &message).await;
            });
            return;
        }
        self.refusing.set(false);
        // tokio's `into_std` deregisters the socket and leaves it non-blocking.
        let client = match client.into_std() {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "CRI socket: could not take over a connection; closed");
                return;
            }
        };
        self.live.count.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.live.clone());
        let relay = relay.clone();
        let stop = self.stop.clone();
        let runtime = Handle::current();
        let started = std::thread::Builder::new()
            .name("podward-cri-conn".to_owned())
            .stack_size(STACK)
            .spawn(move || {
                let _running = running;
                serve(&relay, client, &stop, handshake_deadline, &runtime, open);
            });
        if let Err(e) = started {
            // The closure, with the client's socket, is dropped: the client sees it closed.
            tracing::warn!(error = %e, "CRI socket: could not start a connection thread; closed");
        }
    }

    /// Signals every connection to wind down and waits for their threads until `deadline`.
    pub(super) async fn stop(mut self, deadline: tokio::time::Instant) {
        drop(self.stopper.take());
        loop {
            let ended = self.live.ended.notified();
            let left = self.live.count.load(Ordering::Acquire);
            if left == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                tracing::warn!(
                    connections = left,
                    "CRI connections still open past the shutdown grace; they end with the process"
                );
                return;
            }
        }
    }
}

/// A connection thread: dials containerd and relays, or hands the client to the runtime for
/// the `UNAVAILABLE` answer when containerd cannot be reached.
fn serve(
    relay: &Relay,
    client: UnixStream,
    stop: &PipeReader,
    handshake_deadline: Instant,
    runtime: &Handle,
    open: Open,
) {
    let upstream = match UnixStream::connect(&relay.containerd) {
        Ok(upstream) => upstream,
        Err(e) => {
            tracing::debug!(error = %e, "containerd not reachable; answering UNAVAILABLE");
            let deadline = tokio::time::Instant::from_std(handshake_deadline);
            runtime.spawn(async move {
                let _open = open;
                if let Ok(client) = tokio::net::UnixStream::from_std(client) {
                    unavailable::answer(client, deadline, unavailable::UNREACHABLE).await;
                }
            });
            return;
        }
    };
    if let Err(e) = upstream.set_nonblocking(true) {
        tracing::warn!(error = %e, "could not make a relayed connection non-blocking; closed");
        return;
    }
    connection::relay(relay, &client, &upstream, stop.as_fd(), handshake_deadline);
}
