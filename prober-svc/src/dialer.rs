//! The probe dialer (kubelet's `probe.ProbeDialer`): a fresh TCP connection per probe with
//! `SO_LINGER {on, 1 s}` and `TCP_NODELAY`, bounded by the probe's deadline.
//!
//! kubelet sets the linger so that thousands of probe connections do not pile up (issue 89898).
//! A 1 s linger rather than 0 keeps a clean FIN close instead of an RST.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// kubelet's linger time.
pub const LINGER: Duration = Duration::from_secs(1);

/// Why a dial failed, worded as Go's `net.Dial` errors ("dial tcp 1.2.3.4:80: connect: connection
/// refused", "dial tcp 1.2.3.4:80: i/o timeout", "dial tcp: lookup foo: no such host").
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The deadline passed while resolving or connecting.
    #[error("dial tcp {0}: i/o timeout")]
    Timeout(String),
    /// The connect failed (refused, unreachable...).
    #[error("dial tcp {addr}: connect: {}", go_errno(.source))]
    Connect {
        /// `host:port` dialled.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The socket could not be created or configured.
    #[error("dial tcp {addr}: socket: {}", go_errno(.source))]
    Socket {
        /// `host:port` dialled.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The host name did not resolve.
    #[error("dial tcp: lookup {host}: {reason}")]
    Lookup {
        /// The name looked up.
        host: String,
        /// Go-like reason ("no such host").
        reason: String,
    },
}

impl DialError {
    /// Whether the deadline caused it.
    pub fn is_timeout(&self) -> bool {
        matches!(self, DialError::Timeout(_))
    }
}

/// Go's `net.JoinHostPort`: brackets around IPv6 literals.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Connects to `host:port` before `deadline`; an IP literal is dialled without any lookup, a name
/// is resolved and its addresses are tried in order.
pub async fn dial(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, DialError> {
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return dial_addr(SocketAddr::new(ip, port), deadline).await;
    }
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout_at(deadline, tokio::net::lookup_host((host, port))).await {
            Err(_) => return Err(DialError::Timeout(join_host_port(host, port))),
            Ok(Err(_)) => {
                return Err(DialError::Lookup {
                    host: host.to_owned(),
                    reason: "no such host".to_owned(),
                });
            }
            Ok(Ok(it)) => it.collect(),
        };
    let mut last = DialError::Lookup {
        host: host.to_owned(),
        reason: "no such host".to_owned(),
    };
    for addr in addrs {
        match dial_addr(addr, deadline).await {
            Ok(s) => return Ok(s),
            Err(e) if e.is_timeout() => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to one address before `deadline`.
pub async fn dial_addr(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, DialError> {
    let sock_err = |source| DialError::Socket {
        addr: addr.to_string(),
        source,
    };
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(sock_err)?;
    let sref = SockRef::from(&sock);
    sref.set_linger(Some(LINGER)).map_err(sock_err)?;
    sref.set_tcp_nodelay(true).map_err(sock_err)?;
    match tokio::time::timeout_at(deadline, sock.connect(addr)).await {
        Err(_) => Err(DialError::Timeout(addr.to_string())),
        Ok(Err(source)) => Err(DialError::Connect {
            addr: addr.to_string(),
            source,
        }),
        Ok(Ok(stream)) => Ok(stream),
    }
}

/// Go prints a `syscall.Errno` as libc's `strerror` in lower case ("connection refused"); Rust's
/// `io::Error` adds a capital and "(os error N)".
pub fn go_errno(e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(libc_code) => match libc_code {
            111 => "connection refused",
            113 => "no route to host",
            101 => "network is unreachable",
            104 => "connection reset by peer",
            110 => "connection timed out",
            99 => "cannot assign requested address",
            24 => "too many open files",
            _ => "",
        }
        .to_owned(),
        None => String::new(),
    };
    if !text.is_empty() {
        return text;
    }
    let s = e.to_string();
    let s = s.split(" (os error").next().unwrap_or(&s).to_owned();
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => s,
    }
}
