//! TCP probe (kubelet `pkg/probe/tcp`): connect within the timeout with the probe dialer, close at
//! once, send and read nothing — so nothing of the target's ever reaches the probe's output. Any
//! dial error is a Failure with Go's error text, never an error; only a port that does not
//! resolve is (kubelet: Unknown + err), and a `host` whose every address `--probe-host-policy`
//! denies.

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{Answer, ProbeTarget};
use super::dial_error::DialError;
use super::dialer::{self, Options};
use super::host_policy::Guard;
use super::port::{PortError, resolve_port};
use super::resolve::Names;
use crate::spec::PortRef;

/// Why a TCP probe errored (kubelet: Unknown + err), rather than failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TcpError {
    /// The probe's port did not resolve.
    #[error(transparent)]
    Port(#[from] PortError),
    /// `--probe-host-policy` forbids every address of the probe's `host`.
    #[error(transparent)]
    Denied(DialError),
}

/// One TCP probe; `guard` checks the addresses of a probe's `host`, which resolves through
/// `names`.
pub(crate) async fn probe(
    host: Option<&str>,
    port: &PortRef,
    timeout: Duration,
    target: &ProbeTarget<'_>,
    guard: Guard,
    names: Names<'_>,
) -> Result<Answer, TcpError> {
    let port = resolve_port(port, target.ports)?;
    let deadline = Instant::now() + timeout;
    // A connection that carries no data: no TCP_NODELAY (see `Options::NO_DATA`).
    let result = match host {
        Some(h) => dialer::connect_guarded(h, port, deadline, Options::NO_DATA, guard, names).await,
        None => {
            dialer::connect_addr((target.host_ip, port).into(), deadline, Options::NO_DATA).await
        }
    };
    Ok(match result {
        Ok(conn) => {
            // Closed at once, with the probe dialer's linger, off the runtime's threads.
            conn.close();
            Answer::Success(String::new())
        }
        Err(e) if e.is_denied() => return Err(TcpError::Denied(e)),
        Err(e) => Answer::Failure(e.to_string()),
    })
}
