//! The CRI socket as a byte relay.
//!
//! Every accepted connection gets its own connection to containerd, as if the client had dialled
//! containerd itself: containerd sees the same connections, SETTINGS, PINGs, flow control and
//! GOAWAYs, and one client's flow-control window is never another's. Bytes are copied both ways
//! unchanged, in order, as they arrive, by a thread of the connection's own (`relay/threads.rs`
//! says why); an [`observe::SideReader`](crate::observe::SideReader) per direction reads what
//! was copied, beside the copy, to find the watched calls.
//!
//! Nothing is terminated or re-encoded, so every client that works against containerd works
//! through the shim (gRPC C-core's `:authority` for unix sockets included), and Exec, Attach and
//! PortForward answers pass byte for byte: their URLs are never rewritten.
//!
//! containerd absent: the client's calls are answered `UNAVAILABLE` and its connection closed
//! (`relay/unavailable.rs`), which every gRPC client reports as it does a failed dial.

mod connection;
mod pump;
mod threads;
mod unavailable;

pub use threads::MAX_CONNECTIONS;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fault::Faults;
use crate::observe::Recorder;

/// Default read buffer per direction of a connection (containerd's side; the client's is at most
/// [`REQUEST_BUFFER`]). Every read costs the relay a wake-up, the reader's set-up and a write
/// whatever its size, and containerd's socket often holds more than 64 KiB during a large
/// answer, so reading it 128 KiB at a time takes a multi-MiB List in fewer, cheaper steps; past
/// that, reads seldom fill the buffer (docs/benchmarks.md, Shim).
pub const DEFAULT_BUFFER: usize = 128 << 10;

/// The most a client's bytes are read at once (the read buffer above if smaller). A client's
/// side carries small requests, but also whatever header blocks a client chooses to send, and
/// the side reader decodes each chunk before the connection's thread looks at containerd's side
/// again: a smaller chunk bounds how long one client sending header blocks as fast as it can
/// holds up its own answers, at no cost to requests of ordinary size.
pub const REQUEST_BUFFER: usize = 16 << 10;

/// How long containerd may take to answer what was in flight once the client side of a
/// connection has gone (its answer tells whether a mutating call took effect).
const DRAIN_AFTER_CLIENT: Duration = Duration::from_secs(5);

/// The relay's settings and shared parts.
pub struct Relay {
    /// containerd's socket.
    pub containerd: PathBuf,
    /// Where finished calls go.
    pub recorder: Arc<Recorder>,
    /// Armed faults (test builds).
    pub faults: Faults,
    /// A client must send the HTTP/2 connection preface within this.
    pub handshake_timeout: Duration,
    /// On shutdown, how long in-flight calls may take to finish.
    pub shutdown_grace: Duration,
    /// On shutdown, how long calls whose own deadline is later may take, at most.
    pub max_shutdown_grace: Duration,
    /// Read buffer per direction.
    pub buffer: usize,
    /// Most connections relayed at once (one thread each).
    pub max_connections: usize,
}

impl Relay {
    /// The relay's accept loop, to spawn: accepts connections on `listener` until `stop`, each
    /// relayed on a thread of its own, then lets every connection wind down (see
    /// `connection.rs`) within the shutdown grace and returns.
    ///
    /// # Errors
    /// The connections' stop signal could not be made (no descriptor left).
    pub fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<impl Future<Output = ()> + Send> {
        let threads = threads::Threads::new()?;
        Ok(self.accept(listener, stop, threads))
    }

    async fn accept(
        self: Arc<Self>,
        listener: UnixListener,
        mut stop: watch::Receiver<bool>,
        threads: threads::Threads,
    ) {
        loop {
            if *stop.borrow_and_update() {
                break;
            }
            tokio::select! {
                r = stop.changed() => if r.is_err() { break },
                r = listener.accept() => match r {
                    Ok((client, _)) => threads.start(&self, client),
                    Err(e) => {
                        // EMFILE and friends: keep serving the open connections, retry soon.
                        tracing::warn!(error = %e, "CRI socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        // Not accepting any more: under socket activation new connections queue in the
        // listening socket, which systemd keeps for the next process.
        drop(listener);
        let deadline = Instant::now()
            + self.shutdown_grace.max(self.max_shutdown_grace)
            + Duration::from_millis(250);
        threads.stop(deadline).await;
    }
}
