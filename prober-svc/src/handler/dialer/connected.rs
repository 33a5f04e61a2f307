//! A probe socket once its handshake is over, registered with the reactor or not yet, and its
//! close.
//!
//! The probes' sockets carry no `SO_LINGER` (the dialer's module doc says why), so `close(2)`
//! returns at once whatever the peer does: closing is a plain drop.

use tokio::net::TcpStream;

use crate::handler::dial_error::DialError;

/// A connected probe socket. On a local path (loopback, or a veth to a pod on this node) the
/// handshake is over before `connect(2)` returns, so with the dial's `Options::immediate` the
/// socket is handed out without being registered with the reactor: an HTTP probe then writes its
/// request before it registers (see [`super::stream::ProbeStream`]).
#[derive(Debug)]
pub(crate) enum Connected {
    /// Connected at once; not registered with the tokio reactor.
    Ready(std::net::TcpStream),
    /// The handshake had to be waited for, so it is registered already.
    Registered(TcpStream),
}

impl Connected {
    /// The tokio stream (registers a [`Connected::Ready`] socket).
    pub(crate) fn into_tokio(self, addr: impl FnOnce() -> String) -> Result<TcpStream, DialError> {
        match self {
            Connected::Ready(s) => TcpStream::from_std(s).map_err(|source| DialError::Socket {
                addr: addr(),
                source,
            }),
            Connected::Registered(s) => Ok(s),
        }
    }

    /// Closes the connection. It has no linger (see the module's doc), so `close(2)` never waits
    /// for the peer: a close must never block a runtime thread.
    pub(crate) fn close(self) {
        // A registered socket is deregistered from the reactor by its drop, on the runtime
        // thread that owns it.
        drop(self);
    }
}
