//! gRPC health probe (kubelet `pkg/probe/grpc`): plaintext `grpc.health.v1.Health/Check` on the
//! pod IP, User-Agent `kube-probe/<x.y>`, one deadline (`timeoutSeconds`) for dial and call.
//!
//! Like grpc-go's blocking dial, a refused connection is retried until the deadline, so a closed
//! port reads "timeout: failed to connect service ... within 1s: context deadline exceeded" as in
//! kubelet. Only `SERVING` is a Success; every error is a Failure with kubelet's text.

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

use crate::dialer::{self, DialError};
use crate::probe::{Attempt, Outcome, go_duration};

/// How close to the deadline a cancellation counts as the deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// grpc-go's first reconnect backoff.
const REDIAL_BACKOFF: Duration = Duration::from_secs(1);

/// One gRPC probe.
pub(crate) async fn probe(
    host: IpAddr,
    port: u16,
    service: &str,
    timeout: Duration,
    user_agent: &str,
) -> Attempt {
    let addr = SocketAddr::new(host, port);
    let shown = addr.to_string();
    let deadline = Instant::now() + timeout;
    let channel = match connect(addr, user_agent, deadline).await {
        Ok(ch) => ch,
        Err(None) => {
            return Ok(Outcome::Failure(format!(
                "timeout: failed to connect service {shown:?} within {}: context deadline exceeded",
                go_duration(timeout)
            )));
        }
        Err(Some(e)) => {
            return Ok(Outcome::Failure(format!(
                "error: failed to connect service at {shown:?}: {e}"
            )));
        }
    };
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let timed_out = || {
        Outcome::Failure(format!(
            "timeout: health rpc did not complete within {}",
            go_duration(timeout)
        ))
    };
    let resp = match tokio::time::timeout_at(deadline, HealthClient::new(channel).check(req)).await
    {
        Err(_) => return Ok(timed_out()),
        Ok(Ok(resp)) => resp.into_inner(),
        Ok(Err(status)) => {
            return Ok(match status.code() {
                tonic::Code::Unimplemented => Outcome::Failure(format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                )),
                tonic::Code::DeadlineExceeded => timed_out(),
                // tonic enforces the grpc-timeout it sent itself and reports "Timeout expired"
                // as Cancelled; for the caller that is the deadline, as in grpc-go.
                tonic::Code::Cancelled if Instant::now() + DEADLINE_SLACK >= deadline => {
                    timed_out()
                }
                _ => Outcome::Failure(format!(
                    "error: health rpc probe failed: {}",
                    go_status(&status)
                )),
            });
        }
    };
    Ok(match ServingStatus::try_from(resp.status) {
        Ok(ServingStatus::Serving) => Outcome::Success("service healthy".to_owned()),
        Ok(other) => Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            other.as_str_name()
        )),
        Err(_) => Outcome::Failure(format!(
            "service unhealthy (responded with \"{}\")",
            resp.status
        )),
    })
}

/// Blocking dial: `Err(None)` is the deadline, `Err(Some)` a non-retryable error.
async fn connect(
    addr: SocketAddr,
    user_agent: &str,
    deadline: Instant,
) -> Result<Channel, Option<String>> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(user_agent))
        .map_err(|e| Some(e.to_string()))?;
    let stream = loop {
        match dialer::dial_addr(addr, deadline).await {
            Ok(s) => break s,
            Err(DialError::Timeout(_)) => return Err(None),
            Err(DialError::Connect { .. }) => {
                let next = Instant::now() + REDIAL_BACKOFF;
                if next >= deadline {
                    tokio::time::sleep_until(deadline).await;
                    return Err(None);
                }
                tokio::time::sleep_until(next).await;
            }
            Err(e) => return Err(Some(e.to_string())),
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
        Err(_) => Err(None),
        Ok(Err(e)) => Err(Some(e.to_string())),
        Ok(Ok(ch)) => Ok(ch),
    }
}

/// A gRPC status as grpc-go prints it: `rpc error: code = Unavailable desc = ...`.
pub(crate) fn go_status(status: &tonic::Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        go_code(status.code()),
        status.message()
    )
}

/// grpc-go's names of status codes.
pub(crate) fn go_code(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}
