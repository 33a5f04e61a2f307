//! One end of a relayed connection, registered with the runtime for readability alone.
//!
//! tokio's `UnixStream` registers its socket for reading and writing, edge-triggered. Each time
//! the peer reads what the relay wrote, the kernel frees room in the socket and reports it
//! writable: with the write interest registered, that wakes the relay's thread from
//! `epoll_wait` although nothing waits to write (the relay's writes nearly always go through at
//! once). At one call at a time that is a wake-up for every write, on the CPUs the client and
//! containerd need: a relay that waits only for what it reads (as socat does with `select`)
//! spent less CPU per call and added less time to it (docs/benchmarks.md, Shim).
//!
//! So each socket is registered for readability only, and a write that would block waits on a
//! second descriptor of the same socket (a `dup`), registered for writability only while writes
//! block: from the first write that would block until a write goes through whole at once. A
//! large answer to a slow reader keeps it registered while it lasts; a connection back to small
//! calls drops it.
#![allow(unsafe_code)]

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A connected socket whose readiness to read the runtime reports.
#[derive(Debug)]
pub(super) struct Socket {
    io: AsyncFd<UnixStream>,
}

impl Socket {
    /// Takes `stream` over from tokio, registered for readability alone.
    pub(super) fn new(stream: tokio::net::UnixStream) -> io::Result<Self> {
        // tokio's `into_std` deregisters it and leaves it non-blocking.
        let stream = stream.into_std()?;
        Ok(Self {
            io: register(stream, Interest::READABLE)?,
        })
    }

    /// Reads what is there into `buf`, waiting until something (or the end) is.
    pub(super) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.io.readable().await?;
            match ready.try_io(|s| s.get_ref().read(buf)) {
                Ok(Ok(n)) => {
                    // A stream socket's read that leaves room in the buffer took all there was:
                    // the next read waits for more instead of asking again for nothing (as
                    // tokio's own streams do). Bytes that came meanwhile are a newer event,
                    // which this does not clear.
                    if n > 0 && n < buf.len() {
                        ready.clear_ready();
                    }
                    return Ok(n);
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }

    /// Writes what the socket takes now, without waiting.
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.io.get_ref().write(buf)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.io.get_ref().shutdown(std::net::Shutdown::Write)
    }
}

/// Writes to a [`Socket`], waiting for room only when a write would block.
#[derive(Debug)]
pub(super) struct Writer {
    socket: Arc<Socket>,
    /// The socket's second descriptor, registered for writability while writes block.
    armed: Option<AsyncFd<UnixStream>>,
    /// The second descriptor while no write blocks, kept for the next time one does.
    spare: Option<UnixStream>,
}

impl Writer {
    pub(super) fn new(socket: Arc<Socket>) -> Self {
        Self {
            socket,
            armed: None,
            spare: None,
        }
    }

    /// Writes what the socket takes now, without waiting (`WouldBlock` when it takes nothing).
    pub(super) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.socket.try_write(buf)
    }

    /// No more bytes will be written (the peer reads its end).
    pub(super) fn shutdown(&self) -> io::Result<()> {
        self.socket.shutdown_write()
    }

    /// Writes all of `buf`, waiting for room as often as needed: what the socket takes now,
    /// then the rest as [`Writer::write_rest`] writes it.
    pub(super) async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let written = loop {
            match self.socket.try_write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        self.write_rest(&buf[written..]).await
    }

    /// Writes all of `buf`, the rest of a chunk the socket would not take at once: waits for
    /// room first rather than ask the full socket again.
    pub(super) async fn write_rest(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write_when_ready(buf).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
        }
        Ok(())
    }

    /// A write went through whole at once: stop watching for room (see the module docs).
    pub(super) fn disarm(&mut self) {
        if let Some(armed) = self.armed.take() {
            self.spare = Some(armed.into_inner());
        }
    }

    /// Waits for room, through the second descriptor, and writes what fits then.
    async fn write_when_ready(&mut self, buf: &[u8]) -> io::Result<usize> {
        let armed = match self.armed.take() {
            Some(armed) => armed,
            None => {
                let dup = match self.spare.take() {
                    Some(dup) => dup,
                    None => self.socket.io.get_ref().try_clone()?,
                };
                // Registering reports the room there is now: a write that blocked just before
                // cannot miss the room made since.
                register(dup, Interest::WRITABLE)?
            }
        };
        let armed = self.armed.insert(armed);
        loop {
            let mut ready = armed.writable().await?;
            if let Ok(written) = ready.try_io(|s| s.get_ref().write(buf)) {
                return written;
            }
        }
    }
}

/// `stream` registered with the current runtime for `interest` alone.
fn register(stream: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: the `AsyncFd` owns the `UnixStream`, whose descriptor stays open and the same
    // until the `AsyncFd` drops it or gives it back with `into_inner` (both deregister first).
    unsafe { AsyncFd::register_with_interest(stream, interest) }.map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
