//! Loopback ports for host-network pods and test servers, and plain HTTP GETs to the daemons'
//! admin endpoints and the test servers.

use std::net::{Ipv4Addr, TcpListener};

/// A loopback TCP port that was free a moment ago, below the ephemeral range (32768+).
///
/// Below the ephemeral range because a port the kernel may hand out as the *source* port of an
/// outgoing connection (probes, benchmarks, other tests on the machine) can be taken between
/// this check and the test server's bind — seen once, when a benchmark's connections held a port
/// a test's httpd then could not bind. Each call moves on, and test processes running at once
/// start at different places (by pid), so concurrent callers do not collide. Another process
/// could still take the port before the caller binds, which is why tests bind it promptly.
/// Falls back to a kernel-chosen port when the whole range is busy; panics only when the
/// loopback interface cannot bind at all (then no test on this machine can work).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() % 1000) as u16 * 11;
    for _ in 0..SPAN {
        let offset = base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = FIRST + offset;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    #[allow(clippy::expect_used)]
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    #[allow(clippy::expect_used)]
    listener
        .local_addr()
        .expect("local_addr of a bound socket")
        .port()
}

/// `GET path` over HTTP/1.0 to `addr` (the server answers and closes): the whole response,
/// status line and headers included, as text, within `timeout`. Hand-rolled for the same reason
/// as [`http_get_status`]; for small answers (`/metrics`, a test page).
pub async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "http get timed out"))?
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
