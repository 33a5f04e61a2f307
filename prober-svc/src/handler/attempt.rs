//! What every handler is given and what it answers: the two types all handlers share. The answer,
//! [`Outcome`], is also what the prober's retries make of it and what a worker counts and
//! publishes: one type from the handler to the results.

use std::net::IpAddr;

use super::output::capped;
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

/// What one probe came to, with its output (kubelet's `probe.Result` and output string;
/// kubelet's `Unknown` is either a Failure or an error, so it has no variant of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Success(String),
    /// A pass kubelet reports as a `ProbeWarning` event (an HTTP redirect to another host).
    Warning(String),
    /// The check failed.
    Failure(String),
    /// The handler errored on every attempt, with the last error's message (kubelet: "probe
    /// errored and resulted in unknown state"); the worker discards the probe. A handler never
    /// answers this: its own errors are typed, and the prober retries them (`crate::probing::probe`).
    Errored(String),
}

impl Outcome {
    /// What a worker counts towards its thresholds: Success (a warning too) or Failure; `None`
    /// for an errored probe.
    pub fn result(&self) -> Option<ProbeResult> {
        match self {
            Self::Success(_) | Self::Warning(_) => Some(ProbeResult::Success),
            Self::Failure(_) => Some(ProbeResult::Failure),
            Self::Errored(_) => None,
        }
    }

    /// The output (for an errored probe, the error's message).
    pub fn output(&self) -> &str {
        match self {
            Self::Success(o) | Self::Warning(o) | Self::Failure(o) | Self::Errored(o) => o,
        }
    }

    /// This outcome with its output cut to kubelet's limit ([`super::output::MAX_OUTPUT_BYTES`]).
    /// A worker applies it to every outcome it is handed, so what it keeps and publishes (its
    /// status, events, a kill's record) is capped once, whichever runner produced it.
    pub fn capped(self) -> Self {
        let cut = |mut o: String| {
            o.truncate(capped(&o).len());
            o
        };
        match self {
            Self::Success(o) => Self::Success(cut(o)),
            Self::Warning(o) => Self::Warning(cut(o)),
            Self::Failure(o) => Self::Failure(cut(o)),
            Self::Errored(o) => Self::Errored(cut(o)),
        }
    }
}

/// A probe's result, kubelet's `results.Result`: what a probe yields (Success or Failure), what
/// a worker counts towards its thresholds, and what it caches and publishes once a threshold is
/// reached (where Unknown is startup's initial value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not determined yet (startup's initial value); never the result of a probe.
    Unknown,
    /// The probe passed.
    Success,
    /// The probe failed.
    Failure,
}
