//! Closes probe sockets without waiting, on the caller's thread.
//!
//! kubelet's `SO_LINGER {on, 1 s}` makes `close(2)` wait until the peer acknowledges the data
//! still queued and the FIN, up to a second. In Go only the probing goroutine's OS thread waits;
//! on a tokio worker the wait stalls every task of that thread, and a target that never reads
//! makes every close of its probe sockets wait the whole second: one pod's targets could stall
//! every other pod's probes (a single closing thread only moves the stall: it closes one such
//! socket per second, and its queue fills).
//!
//! On Linux a non-zero linger changes nothing on the wire: the FIN (or the RST, when received
//! data was left unread) is sent by `close` either way, and when the second is over the kernel
//! finishes the close in the background exactly as it does for a socket without linger — the
//! queued data and the FIN keep being retransmitted, TIME-WAIT lands where it would have (both
//! measured; docs/probes.md). The only effect is how long `close` blocks. So the linger is
//! cleared right before the close: the packets are kubelet's, the caller never waits, and no
//! socket is held open after its probe, so nothing can pile up behind a slow peer.

use std::os::fd::OwnedFd;

use socket2::SockRef;

/// Closes `fd` at once: clears `SO_LINGER`, then closes; the kernel finishes the TCP close in
/// the background.
pub fn close(fd: impl Into<OwnedFd>) {
    let fd = fd.into();
    // If the option cannot be cleared (not a socket any more?), the close may wait, as kubelet's.
    let _ = SockRef::from(&fd).set_linger(None);
    drop(fd);
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use socket2::{Domain, Socket, Type};

    use super::*;

    /// A connected pair whose accepting side has the smallest receive buffer.
    fn pair() -> (TcpStream, TcpStream) {
        let l = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        l.set_recv_buffer_size(1).expect("rcvbuf");
        l.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind");
        l.listen(1).expect("listen");
        let l: TcpListener = l.into();
        let s = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (peer, _) = l.accept().expect("accept");
        (s, peer)
    }

    #[test]
    fn a_socket_the_peer_never_reads_closes_at_once_and_its_data_and_fin_still_arrive() {
        let (mut s, mut peer) = pair();
        SockRef::from(&s)
            .set_linger(Some(Duration::from_secs(1)))
            .expect("linger");
        s.set_nonblocking(true).expect("nonblocking");
        // Far more than the peer's window: most of it is still queued on our side.
        let data = vec![b'x'; 256 * 1024];
        let mut sent = 0;
        while let Ok(n) = s.write(&data[sent..]) {
            sent += n;
            if sent == data.len() {
                break;
            }
        }
        assert!(sent > 0);
        let started = Instant::now();
        close(s);
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(100),
            "close waited {took:?} (a lingering close waits 1 s)"
        );
        // The close was graceful, as kubelet's: the peer reads every byte, then EOF — no RST.
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = Vec::new();
        peer.read_to_end(&mut got).expect("every byte, then EOF");
        assert_eq!(got.len(), sent);
    }

    #[test]
    fn unread_data_still_resets_the_connection_as_a_lingering_close_does() {
        let (s, mut peer) = pair();
        peer.write_all(b"never read").expect("write");
        // Wait until the bytes are in our receive queue.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut b = [0u8; 1];
        while s.peek(&mut b).expect("peek") == 0 {
            assert!(Instant::now() < deadline);
        }
        close(s);
        peer.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 16];
        let err = peer.read(&mut buf).expect_err("reset");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    }
}
