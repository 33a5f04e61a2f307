//! The stream an HTTP or gRPC probe exchanges over: a fresh connection written to through the
//! plain socket until a write would block, and registered with the reactor only then.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::connected::Connected;

/// A probe connection for the exchanges that send data (HTTP, HTTPS): registered with the
/// reactor only when it first has to wait.
///
/// tokio's readiness of a freshly registered socket is empty, so the first write on it would wait
/// for a reactor turn even though the send buffer of a new connection is empty. Writing through
/// the plain socket until a write would block spares that turn: a probe's request goes out in the
/// same poll that connected, and the reactor is involved once, for the response.
#[derive(Debug)]
pub(crate) struct ProbeStream {
    state: StreamState,
}

#[derive(Debug)]
enum StreamState {
    Plain(std::net::TcpStream),
    Registered(TcpStream),
    /// Registration failed; the error was returned once, the socket is closed.
    Failed,
}

impl ProbeStream {
    /// Wraps a fresh connection.
    pub(crate) fn new(conn: Connected) -> Self {
        let state = match conn {
            Connected::Ready(s) => StreamState::Plain(s),
            Connected::Registered(s) => StreamState::Registered(s),
        };
        Self { state }
    }

    /// The registered stream, registering the plain socket now.
    fn registered(&mut self) -> io::Result<&mut TcpStream> {
        let state = std::mem::replace(&mut self.state, StreamState::Failed);
        self.state = match state {
            StreamState::Plain(s) => StreamState::Registered(TcpStream::from_std(s)?),
            other => other,
        };
        match &mut self.state {
            StreamState::Registered(s) => Ok(s),
            _ => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }
}

impl Drop for ProbeStream {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.state, StreamState::Failed) {
            StreamState::Plain(s) => Connected::Ready(s).close(),
            StreamState::Registered(s) => Connected::Registered(s).close(),
            StreamState::Failed => {}
        }
    }
}

impl AsyncRead for ProbeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // No read on the plain socket first: the answer cannot be there yet (the peer has to be
        // scheduled to write it), so that read would only cost an EAGAIN.
        match self.get_mut().registered() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for ProbeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let StreamState::Plain(s) = &mut this.state {
            match s.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
        match this.registered() {
            Ok(s) => Pin::new(s).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // TCP streams have nothing to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Go's transport closes a finished connection without `shutdown(2)`; the socket is closed
        // (FIN, or RST if the answer was not read to its end, as in Go) when it is dropped right
        // after the exchange, so a separate shutdown would only add a syscall.
        Poll::Ready(Ok(()))
    }
}
