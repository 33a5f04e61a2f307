//! What every handler is given and what it answers: the two types all handlers share.

use std::net::IpAddr;

use super::port::ContainerPort;

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

/// What one handler attempt answered, with its output (kubelet's `probe.Result` and output
/// string; kubelet's `Unknown` is either a Failure or the handler's error, so it has no variant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The check passed.
    Success(String),
    /// A pass kubelet reports as a `ProbeWarning` event (an HTTP redirect to another host).
    Warning(String),
    /// The check failed.
    Failure(String),
}
