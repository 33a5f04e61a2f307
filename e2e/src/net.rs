//! Loopback ports for host-network pods and test servers.

use std::net::{Ipv4Addr, TcpListener};

/// A loopback TCP port that was free a moment ago.
///
/// The port is found by binding port 0 and closing the socket again; another process could take
/// it before the caller binds, which is why tests bind it promptly. Panics only when the loopback
/// interface cannot bind at all (then no test on this machine can work).
pub fn free_port() -> u16 {
    #[allow(clippy::expect_used)]
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    #[allow(clippy::expect_used)]
    listener
        .local_addr()
        .expect("local_addr of a bound socket")
        .port()
}

/// `GET path` over plain HTTP/1.1 to `addr` with `Connection: close`; the response status code.
/// Small on purpose: readiness checks need the status line only, and a hand-rolled request
/// keeps proxies and connection pools out of the way.
pub(crate) async fn http_get_status(
    addr: std::net::SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> std::io::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        // The status line fits in the first read of a small buffer; cap what we read.
        let mut buf = vec![0u8; 512];
        let mut n = 0;
        while n < 12 {
            let m = s.read(&mut buf[n..]).await?;
            if m == 0 {
                break;
            }
            n += m;
        }
        let head = String::from_utf8_lossy(&buf[..n]);
        head.split(' ')
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad status line {head:?}"),
                )
            })
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "http get timed out"))?
}
