//! Why a call to systemd's D-Bus API failed (systemd cgroup driver).

use std::time::Duration;

/// Why a systemd call failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The bus could not be reached (or the session set up).
    #[error(
        "cannot reach systemd on D-Bus at {address}: {source} (with the systemd cgroup driver the \
         housekeeper needs the host's system bus socket; see --systemd-bus)"
    )]
    Connect {
        /// The bus address.
        address: String,
        /// What zbus said.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A method call failed.
    #[error("systemd {call}({unit}): {source}")]
    Call {
        /// The Manager method.
        call: &'static str,
        /// The unit it was called for.
        unit: String,
        /// What systemd (or the bus) said.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A call or the stop job did not finish in time (runc: "Timed out while waiting for systemd
    /// to remove ...").
    #[error("timed out after {after:?} waiting for systemd: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The pod cgroup's name does not end in a slice unit of this pod.
    #[error("{0} is not a pod slice")]
    NotASlice(String),
    /// Called outside a tokio runtime (the client runs on the caller's runtime).
    #[error("no tokio runtime to run D-Bus calls on")]
    NoRuntime,
}
