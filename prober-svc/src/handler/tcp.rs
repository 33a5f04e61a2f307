//! TCP probe (kubelet `pkg/probe/tcp`): connect within the timeout with the probe dialer, close at
//! once, send and read nothing. Any dial error is a Failure with Go's error text, never an error;
//! only a port that does not resolve is (kubelet: Unknown + err).

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{Answer, ProbeTarget};
use super::dialer::{self, Options};
use super::port::{PortError, resolve_port};
use crate::spec::PortRef;

/// One TCP probe.
pub(crate) async fn probe(
    host: Option<&str>,
    port: &PortRef,
    timeout: Duration,
    target: &ProbeTarget<'_>,
) -> Result<Answer, PortError> {
    let port = resolve_port(port, target.ports)?;
    let deadline = Instant::now() + timeout;
    // A connection that carries no data: no TCP_NODELAY (see `Options::NO_DATA`).
    let result = match host {
        Some(h) => dialer::connect(h, port, deadline, Options::NO_DATA).await,
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
        Err(e) => Answer::Failure(e.to_string()),
    })
}
