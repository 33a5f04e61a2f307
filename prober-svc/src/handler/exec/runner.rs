//! The seam between the exec probe and whatever runs the command: CRI `ExecSync`
//! ([`super::cri::CriExec`]) or direct exec ([`crate::direct_exec::DirectExec`]).

use std::time::Duration;

use futures::future::BoxFuture;

use crate::handler::go_text::{go_duration, go_status};

/// Runs a command in a container.
pub trait ExecRunner: Send + Sync + 'static {
    /// Runs `cmd` in `container_id`, giving up after `timeout`.
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>>;

    /// How `container_id`'s exec probes run, once a probe has decided it (for `Status`).
    fn choice(&self, _container_id: &str) -> Option<ExecChoice> {
        None
    }
}

/// How one container's exec probes run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecChoice {
    /// The runner its exec probes go through.
    pub runner: ExecVia,
    /// Why not direct (empty when direct).
    pub reason: String,
}

/// The runner a container's exec probes go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecVia {
    /// Direct exec: the command started in the container by the prober itself.
    Direct,
    /// CRI `ExecSync` (chosen by `--exec-mode=cri`, or the fallback of `auto`).
    Cri,
    /// None: `--exec-mode=direct` refused this container, so its exec probes do not run.
    Refused,
}

impl ExecVia {
    /// The name `Status` reports (`direct`, `cri`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecVia::Direct => "direct",
            ExecVia::Cri => "cri",
            ExecVia::Refused => "none",
        }
    }
}

/// A finished command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit code (0 = success).
    pub exit_code: i32,
}

/// Why a command did not finish. The texts are kubelet's, since they end up in probe output and
/// "probe errored" messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// It ran out of time: the probe fails with this text (kubelet's `ExecProbeTimeout` default).
    #[error("command timed out: {command:?} timed out after {}", go_duration(*.timeout))]
    Timeout {
        /// The command as run, its arguments joined by spaces.
        command: String,
        /// The probe's timeout.
        timeout: Duration,
    },
    /// The runtime failed the call (container gone or stopping, runtime down...): the probe
    /// errors and is retried.
    #[error("{}", go_status(*.code, .message))]
    Runtime {
        /// The gRPC status code the runtime answered.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}
