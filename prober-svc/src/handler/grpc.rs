//! gRPC health probe (kubelet `pkg/probe/grpc`): plaintext `grpc.health.v1.Health/Check` on the
//! pod IP, User-Agent `kube-probe/<x.y>`, one deadline (`timeoutSeconds`) for dial and call.
//!
//! Like grpc-go's blocking dial, a refused connection is retried until the deadline, so a closed
//! port reads "timeout: failed to connect service ... within 1s: context deadline exceeded" as in
//! kubelet. Only `SERVING` is a Success; every error is a Failure with kubelet's text, so this
//! handler never errors.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::attempt::Answer;
use super::dialer::{self, DialError};
use super::go_text::{go_duration, go_status};

/// How close to the deadline a cancellation counts as the deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// grpc-go's first reconnect backoff.
const REDIAL_BACKOFF: Duration = Duration::from_secs(1);

/// Why the blocking dial gave up.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The probe's deadline passed first (refused connections are retried until then).
    #[error("context deadline exceeded")]
    Deadline,
    /// The endpoint could not be built from the address and User-Agent.
    #[error("{0}")]
    Endpoint(tonic::transport::Error),
    /// The dial failed in a way that is not retried (socket or lookup errors).
    #[error(transparent)]
    Dial(DialError),
    /// The HTTP/2 handshake failed.
    #[error("{0}")]
    Handshake(tonic::transport::Error),
}

/// One gRPC probe.
pub(crate) async fn probe(
    host: IpAddr,
    port: u16,
    service: &str,
    timeout: Duration,
    user_agent: &str,
) -> Answer {
    let addr = SocketAddr::new(host, port);
    let shown = addr.to_string();
    let deadline = Instant::now() + timeout;
    let channel = match connect(addr, user_agent, deadline).await {
        Ok(ch) => ch,
        Err(ConnectError::Deadline) => {
            return Answer::Failure(format!(
                "timeout: failed to connect service {shown:?} within {}: context deadline exceeded",
                go_duration(timeout)
            ));
        }
        Err(e) => {
            return Answer::Failure(format!(
                "error: failed to connect service at {shown:?}: {e}"
            ));
        }
    };
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let timed_out = || {
        Answer::Failure(format!(
            "timeout: health rpc did not complete within {}",
            go_duration(timeout)
        ))
    };
    let resp = match tokio::time::timeout_at(deadline, HealthClient::new(channel).check(req)).await
    {
        Err(_) => return timed_out(),
        Ok(Ok(resp)) => resp.into_inner(),
        Ok(Err(status)) => {
            return match status.code() {
                tonic::Code::Unimplemented => Answer::Failure(format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                )),
                tonic::Code::DeadlineExceeded => timed_out(),
                // tonic enforces the grpc-timeout it sent itself and reports "Timeout expired"
                // as Cancelled; for the caller that is the deadline, as in grpc-go.
                tonic::Code::Cancelled if Instant::now() + DEADLINE_SLACK >= deadline => {
                    timed_out()
                }
                _ => Answer::Failure(format!(
                    "error: health rpc probe failed: {}",
                    go_status(status.code(), status.message())
                )),
            };
        }
    };
    match ServingStatus::try_from(resp.status) {
        Ok(ServingStatus::Serving) => Answer::Success("service healthy".to_owned()),
        Ok(other) => Answer::Failure(format!(
            "service unhealthy (responded with {:?})",
            other.as_str_name()
        )),
        Err(_) => Answer::Failure(format!(
            "service unhealthy (responded with \"{}\")",
            resp.status
        )),
    }
}

/// Blocking dial, as grpc-go's `WithBlock`: refused connections are redialled until `deadline`.
async fn connect(
    addr: SocketAddr,
    user_agent: &str,
    deadline: Instant,
) -> Result<Channel, ConnectError> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(user_agent))
        .map_err(ConnectError::Endpoint)?;
    let stream = loop {
        match dialer::dial_addr(addr, deadline).await {
            Ok(s) => break s,
            Err(DialError::Timeout(_)) => return Err(ConnectError::Deadline),
            Err(DialError::Connect { .. }) => {
                let next = Instant::now() + REDIAL_BACKOFF;
                if next >= deadline {
                    tokio::time::sleep_until(deadline).await;
                    return Err(ConnectError::Deadline);
                }
                tokio::time::sleep_until(next).await;
            }
            Err(e) => return Err(ConnectError::Dial(e)),
        }
    };
    let mut slot = Some(stream);
    let connector = tower::service_fn(move |_| {
        let s: Option<TcpStream> = slot.take();
        async move {
            s.map(TokioIo::new)
                .ok_or_else(|| io::Error::other("probe connections are not redialled"))
        }
    });
    match tokio::time::timeout_at(deadline, endpoint.connect_with_connector(connector)).await {
        Err(_) => Err(ConnectError::Deadline),
        Ok(Err(e)) => Err(ConnectError::Handshake(e)),
        Ok(Ok(ch)) => Ok(ch),
    }
}
