//! The one HTTP/2 connection to containerd, re-dialled with backoff whenever it drops.
//!
//! One multiplexed connection is what kubelet itself uses; containerd serves each stream on its
//! own goroutine, so there is no head-of-line blocking to avoid with a pool.

use std::path::PathBuf;
use std::sync::Arc;

use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::RwLock;
use podward_api::backoff::Backoff;
use tokio::net::UnixStream;
use tokio::sync::watch;

use super::body::RequestBody;
use super::{CONN_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::metrics::Metrics;

/// Shared handle on the current upstream connection (if any).
#[derive(Clone)]
pub struct Upstream {
    sender: Arc<RwLock<Option<SendRequest<RequestBody>>>>,
    /// Incremented on every successful connect; `0` until the first one. Consumers (the rebuild
    /// and the event stream) react to changes.
    generation: watch::Sender<u64>,
}

impl Default for Upstream {
    fn default() -> Self {
        Self::new()
    }
}

impl Upstream {
    /// Not connected yet.
    pub fn new() -> Self {
        Self {
            sender: Arc::new(RwLock::new(None)),
            generation: watch::Sender::new(0),
        }
    }

    /// A sender for one request, if connected.
    pub fn sender(&self) -> Option<SendRequest<RequestBody>> {
        let guard = self.sender.read();
        guard.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// Watches connection generations (0 = never connected yet).
    pub fn generations(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Whether connected now.
    pub fn is_connected(&self) -> bool {
        self.sender().is_some()
    }

    /// Keeps a connection to `socket` until `shutdown` fires, reconnecting with backoff.
    pub async fn maintain(
        self,
        socket: PathBuf,
        metrics: Metrics,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut backoff = Backoff::reconnect();
        loop {
            let attempt = tokio::select! {
                _ = shutdown.changed() => return,
                r = dial(&socket) => r,
            };
            match attempt {
                Ok((tx, conn)) => {
                    backoff.reset();
                    *self.sender.write() = Some(tx);
                    metrics.upstream_connected.set(1);
                    self.generation.send_modify(|g| *g += 1);
                    tracing::info!(socket = %socket.display(), "connected to containerd");
                    tokio::select! {
                        _ = shutdown.changed() => return,
                        r = conn => if let Err(e) = r {
                            tracing::warn!(error = %e, "connection to containerd failed");
                        },
                    }
                    *self.sender.write() = None;
                    metrics.upstream_connected.set(0);
                    tracing::warn!("connection to containerd closed; reconnecting");
                }
                Err(e) => {
                    tracing::debug!(error = %e, socket = %socket.display(), "cannot reach containerd");
                }
            }
            let delay = backoff.next_delay();
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

type Conn = http2::Connection<TokioIo<UnixStream>, RequestBody, TokioExecutor>;

/// Dial errors.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("connect: {0}")]
    Connect(#[from] std::io::Error),
    #[error("HTTP/2 handshake: {0}")]
    Handshake(#[from] hyper::Error),
}

async fn dial(socket: &PathBuf) -> Result<(SendRequest<RequestBody>, Conn), DialError> {
    let stream = UnixStream::connect(socket).await?;
    let (tx, conn) = http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_frame_size(MAX_FRAME)
        // Header lists as large as the caller may send (annotations can be big).
        .max_header_list_size(1 << 20)
        .handshake(TokioIo::new(stream))
        .await?;
    Ok((tx, conn))
}
