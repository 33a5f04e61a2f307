//! Closes probe sockets on a thread of their own.
//!
//! kubelet's `SO_LINGER {on, 1 s}` makes `close(2)` wait until the peer acknowledges our FIN, up
//! to a second. In Go only the probing goroutine's OS thread waits (the scheduler moves the other
//! goroutines to another thread); on a tokio worker the wait stalls every task of that thread.
//! It was measured: runtime threads asleep inside `close` in 8–27 % of profile samples at 15,000
//! probes/s, and a peer that stops acknowledging (a pod network torn down mid-probe) would hold a
//! runtime thread for the whole second. So the last close of a probe socket happens here.
//!
//! The queue is bounded: when it is full (or the thread could not start) the caller closes inline,
//! which is what it did before, so nothing is leaked and memory stays bounded.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

/// Sockets waiting to be closed. Each holds a file descriptor, so the bound also bounds how many
/// descriptors a stalled close can keep open.
pub const QUEUE: usize = 4096;

/// One closer per process: sockets are a process resource, and the thread is started on first use
/// so a prober without network probes never has it.
static CLOSER: OnceLock<Option<SyncSender<OwnedFd>>> = OnceLock::new();

fn sender() -> Option<&'static SyncSender<OwnedFd>> {
    CLOSER
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<OwnedFd>(QUEUE);
            let spawned = std::thread::Builder::new()
                .name("probe-closer".into())
                .spawn(move || {
                    for fd in rx {
                        drop(fd);
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the probe socket closer; closing inline");
                    None
                }
            }
        })
        .as_ref()
}

/// Closes `fd` off the caller's thread when possible, inline otherwise.
pub fn close(fd: impl Into<OwnedFd>) {
    let fd = fd.into();
    let Some(tx) = sender() else {
        return drop(fd);
    };
    match tx.try_send(fd) {
        Ok(()) => {}
        Err(TrySendError::Full(fd) | TrySendError::Disconnected(fd)) => drop(fd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_handed_over_socket_is_closed_soon() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let s = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (peer, _) = l.accept().expect("accept");
        close(s);
        // The peer sees the FIN (read returns 0) once the closer has closed it.
        peer.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 1];
        let n = std::io::Read::read(&mut &peer, &mut buf).expect("read EOF, not a timeout");
        assert_eq!(n, 0);
    }
}
