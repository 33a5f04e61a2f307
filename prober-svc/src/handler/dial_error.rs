//! Why a dial failed, in Go's words: kubelet puts the error's text in the probe's output and
//! events, so it must read as `net.Dial`'s.

use std::io;

use crate::handler::go_text::go_errno;

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
    /// Every address of the target is one `--probe-host-policy` forbids (a probe error, never
    /// a Failure).
    #[error(
        "dial tcp {addr}: {kind} address denied by --probe-host-policy=deny-local (the pod is not hostNetwork)"
    )]
    Denied {
        /// `host:port` of the (last) address refused.
        addr: String,
        /// What kind of address it is (`loopback`, `link-local`...).
        kind: &'static str,
    },
    /// The deadline passed while the host name was being resolved.
    #[error("dial tcp: lookup {0}: i/o timeout")]
    LookupTimeout(String),
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
        matches!(self, DialError::Timeout(_) | DialError::LookupTimeout(_))
    }

    /// Whether the host policy refused the target.
    pub fn is_denied(&self) -> bool {
        matches!(self, DialError::Denied { .. })
    }
}
