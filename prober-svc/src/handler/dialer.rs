//! The probe dialer (kubelet's `probe.ProbeDialer`): a fresh TCP connection per probe with
//! `TCP_NODELAY`, bounded by the probe's deadline.
//!
//! kubelet also sets `SO_LINGER {on, 1 s}` (so that thousands of probe connections do not pile
//! up, its issue 89898). On Linux that linger has one effect, how long `close(2)` blocks, which a
//! runtime thread must never do (see `closer`). The probes' sockets ([`connect`],
//! [`connect_addr`], [`connect_untimed`]) therefore carry no linger at all: the packets are those
//! kubelet's socket sends (a FIN, or an RST when received data was left unread) from a close that
//! never waits. [`dial`] and [`dial_addr`] hand out kubelet's lingering socket, for callers that
//! close it with [`closer::close`].
//!
//! The connected socket is [`connected::Connected`]; the stream the HTTP and gRPC exchanges use
//! over it is [`stream::ProbeStream`]; why a dial failed is [`DialError`].

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use self::connected::Connected;
use crate::handler::dial_error::DialError;
use crate::handler::host_policy::Guard;
use crate::handler::resolve::Names;

pub mod closer;
pub mod connected;
pub mod stream;

/// kubelet's linger time.
pub const LINGER: Duration = Duration::from_secs(1);

/// Linux's errno for a non-blocking `connect` still under way (`io::ErrorKind::InProgress` is
/// not stable yet; the errno values in `go_errno` are Linux's too).
const EINPROGRESS: i32 = 115;

/// Go's `net.JoinHostPort`: brackets around IPv6 literals.
pub fn join_host_port(host: &str, port: u16) -> String {
    // Built by hand: `format!` costs several times more, and this runs for every HTTP probe.
    let mut s = String::with_capacity(host.len() + 8);
    if host.contains(':') {
        s.push('[');
        s.push_str(host);
        s.push(']');
    } else {
        s.push_str(host);
    }
    s.push(':');
    push_decimal(&mut s, port.into());
    s
}

/// The text form of `ip` (what `Display` prints), without the formatter for IPv4: `Display` for
/// `Ipv4Addr` goes through padding support and four integer formats, a noticeable share of an
/// HTTP probe's user time.
pub(crate) fn ip_string(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut s = String::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                push_decimal(&mut s, octet.into());
            }
            s
        }
        IpAddr::V6(v6) => v6.to_string(),
    }
}

/// Appends `n` in decimal (`itoa`: no formatter machinery on the per-probe path).
fn push_decimal(s: &mut String, n: u32) {
    s.push_str(itoa::Buffer::new().format(n));
}

/// Connects to `host:port` before `deadline`; an IP literal is dialled without any lookup, a name
/// is resolved and its addresses are tried in order. The socket lingers as kubelet's: close it
/// with [`closer::close`], or dropping it may wait for the peer.
pub async fn dial(
    host: &str,
    port: u16,
    deadline: Instant,
    names: Names<'_>,
) -> Result<TcpStream, DialError> {
    let s = connect(host, port, deadline, Options::PROBE, names)
        .await?
        .into_tokio(port_addr(host, port))?;
    lingering(s, || join_host_port(host, port))
}

/// Connects to one address before `deadline` (close it with [`closer::close`], as [`dial`]'s).
pub async fn dial_addr(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, DialError> {
    let s = connect_addr(addr, deadline, Options::PROBE)
        .await?
        .into_tokio(|| addr.to_string())?;
    lingering(s, || addr.to_string())
}

/// `s` with kubelet's `SO_LINGER {on, 1 s}` (set after the handshake: the option only acts at
/// the close).
fn lingering(s: TcpStream, addr: impl FnOnce() -> String) -> Result<TcpStream, DialError> {
    match socket2::SockRef::from(&s).set_linger(Some(LINGER)) {
        Ok(()) => Ok(s),
        Err(source) => Err(DialError::Socket {
            addr: addr(),
            source,
        }),
    }
}

fn port_addr(host: &str, port: u16) -> impl FnOnce() -> String + '_ {
    move || join_host_port(host, port)
}

/// Socket options of a probe connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Options {
    /// `TCP_NODELAY`, which Go sets on every TCP connection.
    pub(crate) nodelay: bool,
    /// Hand out a socket whose handshake completed inside `connect(2)` without a reactor turn.
    pub(crate) immediate: bool,
}

impl Options {
    /// What kubelet's probe dialer gives every connection: Go's `TCP_NODELAY` default (its
    /// `SO_LINGER` is left out: see the module's doc).
    pub(crate) const PROBE: Options = Options {
        nodelay: true,
        immediate: true,
    };
    /// A connection that never carries data (the TCP probe): Nagle's algorithm only delays data,
    /// so `TCP_NODELAY` would change nothing on the wire and costs a syscall per probe.
    ///
    /// It still waits for the reactor after `connect`: closing in the same poll (measured) made
    /// the prober close before the target accepted, which moves TIME-WAIT to the prober's side
    /// and, at a high probe rate, made the prober fall behind with timeouts where waiting keeps
    /// up (docs/benchmarks.md, Prober).
    pub(crate) const NO_DATA: Options = Options {
        nodelay: false,
        immediate: false,
    };
}

/// [`dial`] without registering a socket that connected at once.
pub(crate) async fn connect(
    host: &str,
    port: u16,
    deadline: Instant,
    opts: Options,
    names: Names<'_>,
) -> Result<Connected, DialError> {
    connect_guarded(host, port, deadline, opts, Guard::OPEN, names).await
}

/// [`connect`], refusing every address `guard` denies: the check is on the address actually
/// dialled, after resolution, so a name cannot point a probe where its literal could not.
pub(crate) async fn connect_guarded(
    host: &str,
    port: u16,
    deadline: Instant,
    opts: Options,
    guard: Guard,
    names: Names<'_>,
) -> Result<Connected, DialError> {
    let mut dialing = None;
    let steps = Steps { opts, guard, names };
    dial_steps(host, port, Some(deadline), steps, &mut dialing).await
}

/// [`connect_guarded`] with no timer of its own, for a caller whose one timer bounds the dial
/// and what follows it: `dialing` tells that caller which address the dial was at when its
/// deadline fired ([`timeout_text`] words it as Go does).
pub(crate) async fn connect_untimed(
    host: &str,
    port: u16,
    opts: Options,
    guard: Guard,
    names: Names<'_>,
    dialing: &mut Option<SocketAddr>,
) -> Result<Connected, DialError> {
    let steps = Steps { opts, guard, names };
    dial_steps(host, port, None, steps, dialing).await
}

/// The timeout of a dial stopped while at `dialing` (an address, or still resolving `host`), as
/// [`DialError::Timeout`] says it from inside the dialer.
pub(crate) fn timeout_text(host: &str, port: u16, dialing: Option<SocketAddr>) -> DialError {
    match dialing {
        Some(addr) => DialError::Timeout(addr.to_string()),
        None if literal_ip(host).is_none() => DialError::LookupTimeout(host.to_owned()),
        None => DialError::Timeout(join_host_port(host, port)),
    }
}

/// `host` as an IP literal (IPv6 with or without brackets), if it is one.
fn literal_ip(host: &str) -> Option<IpAddr> {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()
}

/// How a dial goes: its socket options, the host policy's check, where names resolve.
#[derive(Clone, Copy)]
struct Steps<'a> {
    opts: Options,
    guard: Guard,
    names: Names<'a>,
}

/// `f` before `deadline`, or unbounded (`None`) when the caller's own timer bounds it.
async fn before<F: std::future::Future>(deadline: Option<Instant>, f: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        None => Some(f.await),
    }
}

async fn dial_steps(
    host: &str,
    port: u16,
    deadline: Option<Instant>,
    steps: Steps<'_>,
    dialing: &mut Option<SocketAddr>,
) -> Result<Connected, DialError> {
    let Steps { opts, guard, .. } = steps;
    let Some(ip) = literal_ip(host) else {
        // Boxed, as the wait below: the lookup's state is the largest of the dial's, and inline
        // it would be carried by every HTTP probe's future, which the worker allocates per probe
        // (past glibc's per-thread cache, every allocation takes the allocator's slow path).
        return Box::pin(dial_name(host, port, deadline, steps, dialing)).await;
    };
    let addr = SocketAddr::new(ip, port);
    if let Some(refused) = refusal(guard, addr) {
        return Err(refused);
    }
    *dialing = Some(addr);
    match start_connect(addr, opts)? {
        Started::Connected(s) => Ok(Connected::Ready(s)),
        // On a local path the handshake is over inside `connect(2)`; only a remote or slow one
        // waits here.
        Started::InProgress(sock) => Box::pin(wait_connected(addr, sock, deadline)).await,
    }
}

/// `guard`'s refusal of `addr`, as the dialer's error.
fn refusal(guard: Guard, addr: SocketAddr) -> Option<DialError> {
    guard.denies(addr).map(|kind| DialError::Denied {
        addr: addr.to_string(),
        kind,
    })
}

/// [`dial_steps`] for a host name: resolved, then its addresses tried in order.
async fn dial_name(
    host: &str,
    port: u16,
    deadline: Option<Instant>,
    steps: Steps<'_>,
    dialing: &mut Option<SocketAddr>,
) -> Result<Connected, DialError> {
    let Steps { opts, guard, names } = steps;
    // On the probes' own resolver (`resolve`), never on tokio's shared blocking pool.
    let addrs = names.lookup(host, port, deadline).await?;
    let mut last = DialError::Lookup {
        host: host.to_owned(),
        reason: "no such host".to_owned(),
    };
    for addr in addrs {
        if let Some(refused) = refusal(guard, addr) {
            last = refused;
            continue;
        }
        *dialing = Some(addr);
        match connect_within(addr, deadline, opts).await {
            Ok(s) => return Ok(s),
            Err(e) if e.is_timeout() => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// [`dial_addr`] without registering a socket that connected at once.
///
/// The syscalls are those of Go's `netFD.connect`: a non-blocking `connect`, then `getpeername`
/// to tell "connected" from "in progress" (Go uses it to reject spurious poller wake-ups; here it
/// also spares the wait, with [`Options::immediate`], when the handshake completed inside
/// `connect`), and only if the handshake is still under way a wait for writability and
/// `SO_ERROR`.
pub(crate) async fn connect_addr(
    addr: SocketAddr,
    deadline: Instant,
    opts: Options,
) -> Result<Connected, DialError> {
    connect_within(addr, deadline.into(), opts).await
}

/// [`connect_addr`], unbounded when `deadline` is `None` (the caller's timer bounds it).
async fn connect_within(
    addr: SocketAddr,
    deadline: Option<Instant>,
    opts: Options,
) -> Result<Connected, DialError> {
    match start_connect(addr, opts)? {
        Started::Connected(s) => Ok(Connected::Ready(s)),
        Started::InProgress(sock) => wait_connected(addr, sock, deadline).await,
    }
}

/// How far a connect got without waiting.
enum Started {
    /// The handshake completed inside `connect(2)` (and the options allow handing it out).
    Connected(std::net::TcpStream),
    /// The handshake is under way (or its end must be seen through the reactor).
    InProgress(Socket),
}

/// The socket and its non-blocking `connect(2)`, with no wait: a refusal inside `connect` is
/// returned here, anything still under way is left to [`wait_connected`].
fn start_connect(addr: SocketAddr, opts: Options) -> Result<Started, DialError> {
    // Non-blocking and close-on-exec from the start: one syscall, as Go's `sysSocket`.
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )
    .map_err(|source| DialError::Socket {
        addr: addr.to_string(),
        source,
    })?;
    if opts.nodelay {
        sock.set_tcp_nodelay(true)
            .map_err(|source| DialError::Socket {
                addr: addr.to_string(),
                source,
            })?;
    }
    match sock.connect(&addr.into()) {
        Ok(()) => return Ok(Started::Connected(sock.into())),
        Err(e) if e.raw_os_error() == Some(EINPROGRESS) => {}
        Err(source) => {
            return Err(DialError::Connect {
                addr: addr.to_string(),
                source,
            });
        }
    }
    if opts.immediate && sock.peer_addr().is_ok() {
        return Ok(Started::Connected(sock.into()));
    }
    Ok(Started::InProgress(sock))
}

/// Waits, through the reactor, for the end of `sock`'s handshake to `addr`.
async fn wait_connected(
    addr: SocketAddr,
    sock: Socket,
    deadline: Option<Instant>,
) -> Result<Connected, DialError> {
    let sock_err = |source| DialError::Socket {
        addr: addr.to_string(),
        source,
    };
    let connect_err = |source| DialError::Connect {
        addr: addr.to_string(),
        source,
    };
    // No `SO_ERROR` check before the wait (Go's `netFD.connect` has none either): a connection
    // refused inside `connect(2)` makes the socket writable with its error at once, and the check
    // after the wait reads it.
    let stream = TcpStream::from_std(sock.into()).map_err(sock_err)?;
    loop {
        match before(deadline, stream.writable()).await {
            None => return Err(DialError::Timeout(addr.to_string())),
            Some(Err(e)) => return Err(connect_err(e)),
            Some(Ok(())) => {}
        }
        if let Some(e) = stream.take_error().map_err(sock_err)? {
            return Err(connect_err(e));
        }
        if stream.peer_addr().is_ok() {
            return Ok(Connected::Registered(stream));
        }
        // Writable without a peer: a spurious wake-up (Go waits again, so do we). Clear the
        // readiness, or `writable()` would return at once forever.
        let _ = stream.try_io(Interest::WRITABLE, || {
            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
        });
    }
}

#[cfg(test)]
mod tests {
    use socket2::SockRef;

    use super::*;

    #[tokio::test]
    async fn probe_sockets_have_no_linger_and_dial_keeps_kubelets() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let deadline = Instant::now() + Duration::from_secs(5);
        for opts in [Options::PROBE, Options::NO_DATA] {
            let conn = connect_addr(addr, deadline, opts).await.expect("connect");
            let linger = match &conn {
                Connected::Ready(s) => SockRef::from(s).linger(),
                Connected::Registered(s) => SockRef::from(s).linger(),
            };
            // No linger: the close never waits, and there is nothing to clear before it.
            assert_eq!(linger.expect("linger"), None, "{opts:?}");
            conn.close();
        }
        let s = dial_addr(addr, deadline).await.expect("dial");
        assert_eq!(SockRef::from(&s).linger().expect("linger"), Some(LINGER));
    }

    #[test]
    fn join_host_port_and_ip_string_match_display() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("::1", 65535), "[::1]:65535");
        assert_eq!(join_host_port("example", 0), "example:0");
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "10.20.3.104",
            "127.0.0.1",
            "fd00::1:2",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(ip_string(ip), ip.to_string());
        }
    }
}
