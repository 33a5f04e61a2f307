//! The one error type of the harness.

use std::path::PathBuf;

/// Everything that can go wrong while setting up or driving a test node.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A filesystem or process step failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What we were doing.
        action: String,
        /// On which path (or program).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An external command (gcc, ctr, skopeo, cargo...) exited unsuccessfully.
    #[error("command `{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The tail of its standard error.
        stderr: String,
    },
    /// A gRPC call returned an error status.
    #[error("{call}: {status}")]
    Grpc {
        /// Which call.
        call: &'static str,
        /// The status it returned.
        #[source]
        status: tonic::Status,
    },
    /// A gRPC connection could not be made.
    #[error("connect {}: {source}", endpoint.display())]
    Connect {
        /// The socket dialled.
        endpoint: PathBuf,
        /// Why it failed.
        #[source]
        source: tonic::transport::Error,
    },
    /// A condition was not reached before its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// The condition.
        what: String,
        /// How long we waited.
        after: std::time::Duration,
    },
    /// A child process exited when it should have kept running.
    #[error("{name} exited early with {status}")]
    Exited {
        /// The process.
        name: String,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
    /// The request makes no sense (unknown container name, ...).
    #[error("{0}")]
    Invalid(String),
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

impl HarnessError {
    /// An [`HarnessError::Io`] for `action` on `path`.
    pub(crate) fn io(
        action: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let action = action.into();
        let path = path.into();
        move |source| HarnessError::Io {
            action,
            path,
            source,
        }
    }

    /// An [`HarnessError::Grpc`] for `call`.
    pub(crate) fn grpc(call: &'static str) -> impl FnOnce(tonic::Status) -> Self {
        move |status| HarnessError::Grpc { call, status }
    }
}
