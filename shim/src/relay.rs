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
mod settings;
mod threads;
mod unavailable;

pub use settings::{DEFAULT_BUFFER, REQUEST_BUFFER, Relay};
pub use threads::MAX_CONNECTIONS;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::time::Instant;

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
