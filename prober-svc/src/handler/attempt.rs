//! What every handler is given and what it answers: the two types all handlers share. A
//! handler's [`Answer`] is only what one attempt can come to; its errors are its own typed
//! error, which the prober retries (`crate::probing::probe`) before it makes the probe's
//! [`Outcome`](crate::model::outcome::Outcome).

use std::net::IpAddr;

use crate::model::container_port::ContainerPort;

/// Where a probe runs.
#[derive(Debug, Clone, Copy)]
pub struct ProbeTarget<'a> {
    /// The pod IP (or the node IP for a host-network pod), used when the probe gives no host.
    pub host_ip: IpAddr,
    /// The CRI container ID, for exec.
    pub container_id: &'a str,
    /// The container's declared ports, for named ports.
    pub ports: &'a [ContainerPort],
    /// The container's static environment, for `$(VAR)` expansion of exec commands.
    pub env: &'a [(String, String)],
}

/// What one attempt of a handler came to, with its output (kubelet's `probe.Result` and output
/// string, where kubelet's `Unknown` is the handler's error instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The check passed.
    Success(String),
    /// A pass kubelet reports as a `ProbeWarning` event (an HTTP redirect to another host).
    Warning(String),
    /// The check failed.
    Failure(String),
}
