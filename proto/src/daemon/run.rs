//! The one shape of "why a daemon could not run": the failures every daemon's edge shares (its
//! sockets, the admin endpoint, its metrics, its gRPC server) and one variant for what only that
//! daemon checks.
//!
//! The shared variants convert with `?`; the daemon's own error goes through
//! `.map_err(RunError::Daemon)` (a blanket `From<E>` would overlap the shared ones).

use std::convert::Infallible;

use super::admin::{BindError, PathError};
use super::metrics::MetricsError;
use crate::socket::SocketError;

/// Why a daemon could not run. `E` is what only that daemon checks before serving.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E: std::error::Error + 'static = Infallible> {
    /// A Unix socket could not be served (the error names it).
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The admin endpoint could not be bound.
    #[error(transparent)]
    Admin(#[from] BindError),
    /// A metrics page could not be added to the admin endpoint.
    #[error(transparent)]
    AdminPath(#[from] PathError),
    /// Metrics could not be registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The daemon's gRPC server failed.
    #[error("API server: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// What only this daemon checks (a setting, a root, a thread it starts).
    #[error(transparent)]
    Daemon(E),
}
