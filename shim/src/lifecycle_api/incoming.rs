//! Connections on the control socket, admitted once they have sent the HTTP/2 connection
//! preface within the handshake deadline. tonic's server has no such deadline of its own, and a
//! connection that never speaks would otherwise stay open for ever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::metrics::Metrics;

/// Admitted connections not yet taken by the server.
const PENDING: usize = 64;

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

/// Accepts on `listener` until `stop`; yields each connection once its first 24 bytes (the
/// HTTP/2 preface's length; what they are is the server's to judge) arrived within `timeout`.
pub fn incoming(
    listener: UnixListener,
    timeout: Duration,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<std::io::Result<Prefaced>> {
    let (tx, rx) = mpsc::channel(PENDING);
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
                        tracing::warn!(error = %e, "control socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let (tx, metrics) = (tx.clone(), metrics.clone());
            // Each connection waits for its preface on its own task, so a silent one delays
            // nobody else's admission.
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, read_head(stream)).await {
                    Ok(Ok(conn)) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "control connection closed early"),
                    Err(_) => {
                        metrics
                            .handshake_timeouts
                            .with_label_values(&["control"])
                            .inc();
                        tracing::debug!("control connection sent no preface in time; closed");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

async fn read_head(mut stream: UnixStream) -> std::io::Result<Prefaced> {
    let mut head = vec![0u8; crate::h2read::PREFACE_LEN];
    stream.read_exact(&mut head).await?;
    Ok(Prefaced {
        head: Bytes::from(head),
        stream,
    })
}
