//! The bounds every podward gRPC server on a unix socket applies (the shim's control socket, the
//! prober's and the housekeeper's API sockets), so that a client — a careless one or a hostile
//! one with access to the socket — costs bounded resources:
//!
//! - a connection must send the HTTP/2 preface within a handshake deadline ([`incoming`]):
//!   tonic's server has no such deadline of its own, and one that never speaks would stay open
//!   for ever;
//! - HTTP/2 keepalive pings ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]): a peer that died
//!   without closing its socket (a Watch subscriber, typically) is noticed and dropped;
//! - at most [`MAX_CONCURRENT_STREAMS`] streams per connection, and [`MAX_PENDING`] connections
//!   admitted but not yet taken by the server;
//! - each daemon caps its Watch subscribers itself (its own flag), answering one more with
//!   `RESOURCE_EXHAUSTED` and a message that names the limit.
//!
//! `docs/operations.md` lists the values.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

/// Default time a new connection has to send the HTTP/2 preface.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval of the server's HTTP/2 keepalive pings.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a keepalive ping may go unanswered before the connection is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams one connection may have open at once (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const MAX_CONCURRENT_STREAMS: u32 = 64;
/// Connections that sent their preface but that the server has not taken yet.
pub const MAX_PENDING: usize = 64;
/// Length of the HTTP/2 client connection preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
pub const PREFACE_LEN: usize = 24;

/// A tonic server builder with the keepalive and stream bounds above.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
}

/// Registers `<prefix>_handshake_timeouts_total` on `registry` and returns what [`incoming`]
/// calls for each connection closed for want of a preface (the shim counts per socket on its
/// own family). A registration error (a duplicate name) is logged and nothing is counted.
pub fn handshake_timeouts(
    registry: &prometheus::Registry,
    prefix: &str,
) -> Arc<dyn Fn() + Send + Sync> {
    let counter = prometheus::IntCounter::new(
        format!("{prefix}_handshake_timeouts_total"),
        "Connections to the API socket closed because they sent no HTTP/2 preface within the handshake deadline",
    )
    .and_then(|c| registry.register(Box::new(c.clone())).map(|()| c));
    match counter {
        Ok(c) => Arc::new(move || c.inc()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot register the handshake timeout counter");
            Arc::new(|| {})
        }
    }
}

/// A connection whose first bytes were read to check them, replayed before the rest.
#[derive(Debug)]
pub struct Prefaced {
    head: Bytes,
    stream: UnixStream,
}

impl Connected for Prefaced {
    type ConnectInfo = <UnixStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Prefaced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.head.is_empty() {
            let n = self.head.len().min(buf.remaining());
            buf.put_slice(&self.head[..n]);
            self.head.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefaced {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Accepts on `listener` until `stop`; yields each connection once its first [`PREFACE_LEN`]
/// bytes (what they are is the server's to judge) arrived within `timeout`. `on_timeout` is
/// called for each connection closed for want of them (the daemon counts it); `socket` names
/// the socket in logs.
pub fn incoming(
    listener: UnixListener,
    socket: &'static str,
    timeout: Duration,
    on_timeout: Arc<dyn Fn() + Send + Sync>,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<std::io::Result<Prefaced>> {
    let (tx, rx) = mpsc::channel(MAX_PENDING);
    tokio::spawn(async move {
        loop {
            if *stop.borrow_and_update() {
                return;
            }
            let stream = tokio::select! {
                r = stop.changed() => if r.is_err() { return } else { continue },
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(socket, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let (tx, on_timeout) = (tx.clone(), on_timeout.clone());
            // Each connection waits for its preface on its own task, so a silent one delays
            // nobody else's admission.
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, read_head(stream)).await {
                    Ok(Ok(conn)) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(socket, error = %e, "connection closed early"),
                    Err(_) => {
                        on_timeout();
                        tracing::debug!(
                            socket,
                            ?timeout,
                            "connection sent no preface in time; closed"
                        );
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

async fn read_head(mut stream: UnixStream) -> std::io::Result<Prefaced> {
    let mut head = vec![0u8; PREFACE_LEN];
    stream.read_exact(&mut head).await?;
    Ok(Prefaced {
        head: Bytes::from(head),
        stream,
    })
}

#[cfg(test)]
mod tests;
