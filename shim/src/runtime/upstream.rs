//! Whether containerd is up: one idle HTTP/2 connection to it, re-dialled with backoff whenever
//! it drops. It carries no calls (each CRI client has its own relayed connection); it tells
//! readiness, and its generations start the rebuild and the event stream again after containerd
//! comes back.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::RwLock;
use podward_api::backoff::Backoff;
use tokio::net::UnixStream;
use tokio::sync::watch;

use crate::metrics::Metrics;

type RequestBody = Empty<Bytes>;

/// Shared handle on the current upstream connection (if any).
#[derive(Clone)]
pub struct Upstream {
    sender: Arc<RwLock<Option<SendRequest<RequestBody>>>>,
    /// Incremented on every successful connect; `0` until the first one. Consumers (the rebuild
    /// and the event stream) react to changes.
    generation: watch::Sender<u64>,
    /// Up or down, for readiness (edge-triggered, so nothing polls while idle).
    connected: Arc<watch::Sender<bool>>,
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
            connected: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Connection state changes: a receiver that wakes when containerd comes or goes.
    pub fn connected_changes(&self) -> watch::Receiver<bool> {
        self.connected.subscribe()
    }

    /// Watches connection generations (0 = never connected yet).
    pub fn generations(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Whether connected now.
    pub fn is_connected(&self) -> bool {
        let guard = self.sender.read();
        guard.as_ref().is_some_and(|s| !s.is_closed())
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
                    self.connected.send_replace(true);
                    tracing::info!(socket = %socket.display(), "connected to containerd");
                    tokio::select! {
                        _ = shutdown.changed() => return,
                        r = conn => if let Err(e) = r {
                            tracing::warn!(error = %e, "connection to containerd failed");
                        },
                    }
                    *self.sender.write() = None;
                    metrics.upstream_connected.set(0);
                    self.connected.send_replace(false);
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
        .handshake(TokioIo::new(stream))
        .await?;
    Ok((tx, conn))
}
