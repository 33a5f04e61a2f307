//! gRPC health probe (kubelet `pkg/probe/grpc`): plaintext `grpc.health.v1.Health/Check` on the
//! pod IP, User-Agent `kube-probe/<x.y>`, one deadline (`timeoutSeconds`) for dial and call.
//!
//! Like grpc-go's blocking dial, a refused connection is retried until the deadline, so a closed
//! port reads "timeout: failed to connect service ... within 1s: context deadline exceeded" as in
//! kubelet. Only `SERVING` is a Success; every error is a Failure with kubelet's text, so this
//! handler never errors.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::HeaderValue;
use http::header::USER_AGENT;
use http::uri::{Authority, Scheme, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::time::Instant;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::attempt::Answer;
use super::dial_error::DialError;
use super::dialer::stream::ProbeStream;
use super::dialer::{self, Options};
use super::go_text::{go_duration, go_status};
use super::scoped;
use super::target_budget::{Account, Meter, Metered};

/// How close to the deadline a cancellation counts as the deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// grpc-go's client limit on a response's header list (`defaultClientMaxHeaderListSize`);
/// hyper's default is 16 KiB.
const MAX_HEADER_LIST: u32 = 16 << 20;

/// grpc-go's first reconnect backoff.
const REDIAL_BACKOFF: Duration = Duration::from_secs(1);

/// Why the blocking dial gave up.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The probe's deadline passed first (refused connections are retried until then).
    #[error("context deadline exceeded")]
    Deadline,
    /// The dial failed in a way that is not retried (socket or lookup errors).
    #[error(transparent)]
    Dial(DialError),
    /// The HTTP/2 handshake failed.
    #[error("{0}")]
    Handshake(hyper::Error),
}

/// Why the health call gave no response.
enum CallError {
    /// The connection never became an HTTP/2 connection.
    Connect(ConnectError),
    /// The call ended with a status.
    Status(tonic::Status),
}

/// One gRPC probe.
pub(crate) async fn probe(
    host: IpAddr,
    port: u16,
    service: &str,
    timeout: Duration,
    user_agent: &str,
    meter: Option<&Meter>,
) -> Answer {
    let addr = SocketAddr::new(host, port);
    let shown = addr.to_string();
    let deadline = Instant::now() + timeout;
    let connect_failed = |e: ConnectError| match e {
        ConnectError::Deadline => Answer::Failure(format!(
            "timeout: failed to connect service {shown:?} within {}: context deadline exceeded",
            go_duration(timeout)
        )),
        e => Answer::Failure(format!(
            "error: failed to connect service at {shown:?}: {e}"
        )),
    };
    let stream = match dial(addr, deadline).await {
        Ok(s) => s,
        Err(e) => return connect_failed(e),
    };
    let timed_out = || {
        Answer::Failure(format!(
            "timeout: health rpc did not complete within {}",
            go_duration(timeout)
        ))
    };
    // The connection and hyper's tasks live in this future only: when it ends (answer or
    // deadline) the socket is closed, whatever the target does.
    // What the target sends is charged to the node's budget while the probe runs.
    let account = meter.map(Meter::account);
    let waiting = account.as_ref().map(Account::waiting);
    let stream = Metered::new(stream, account);
    let (exec, scope) = scoped::scope();
    let call = scope.run(check(stream, exec, addr, service, user_agent, deadline));
    let resp = match tokio::time::timeout_at(deadline, call).await {
        Err(_) => {
            return match meter.zip(waiting).and_then(|(m, w)| w.exhausted(m)) {
                Some(e) => Answer::Failure(format!("error: health rpc probe failed: {e}")),
                None => timed_out(),
            };
        }
        Ok(Ok(resp)) => resp,
        Ok(Err(CallError::Connect(e))) => return connect_failed(e),
        Ok(Err(CallError::Status(status))) => {
            return match status.code() {
                tonic::Code::Unimplemented => Answer::Failure(format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                )),
                tonic::Code::DeadlineExceeded => timed_out(),
                // A cancellation at the deadline is the deadline, as in grpc-go.
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
async fn dial(addr: SocketAddr, deadline: Instant) -> Result<ProbeStream, ConnectError> {
    loop {
        match dialer::connect_addr(addr, deadline, Options::PROBE).await {
            Ok(conn) => return Ok(ProbeStream::new(conn)),
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
    }
}

/// The HTTP/2 handshake and the `Check` call on `stream`, with hyper's tasks on `exec`.
///
/// hyper's client is used directly rather than through a tonic `Channel`: a channel runs the
/// connection on tokio's executor, where it outlives the probe (see `scoped`). The request is what
/// a channel sends: the client's default HTTP/2 settings (but grpc-go's 16 MiB header list), the
/// origin `http://<addr>`, the User-Agent, and tonic's `grpc-timeout` for the time left.
async fn check(
    stream: Metered<ProbeStream>,
    exec: scoped::ScopedExec,
    addr: SocketAddr,
    service: &str,
    user_agent: &str,
    deadline: Instant,
) -> Result<HealthCheckResponse, CallError> {
    let (sender, conn) = hyper::client::conn::http2::Builder::new(exec)
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_LIST)
        .handshake::<_, tonic::body::Body>(TokioIo::new(stream))
        .await
        .map_err(|e| CallError::Connect(ConnectError::Handshake(e)))?;
    let origin = Origin {
        authority: Authority::try_from(addr.to_string()).ok(),
        user_agent: HeaderValue::from_str(user_agent)
            .unwrap_or_else(|_| HeaderValue::from_static("kube-probe")),
    };
    let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
        let mut sender = sender.clone();
        let req = origin.apply(req);
        async move {
            sender.ready().await?;
            sender.send_request(req).await
        }
    });
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let rpc = async move {
        HealthClient::new(svc)
            .check(req)
            .await
            .map(tonic::Response::into_inner)
            .map_err(CallError::Status)
    };
    tokio::pin!(conn);
    tokio::pin!(rpc);
    tokio::select! {
        biased;
        r = &mut rpc => r,
        // The connection ended (the target closed it): the call's own error says how.
        _ = &mut conn => rpc.await,
    }
}

/// What a tonic channel adds to every request: the origin and the User-Agent.
struct Origin {
    /// `<addr>`; `None` only if the address did not form one (it always does).
    authority: Option<Authority>,
    user_agent: HeaderValue,
}

impl Origin {
    fn apply<B>(&self, req: http::Request<B>) -> http::Request<B> {
        let (mut head, body) = req.into_parts();
        let mut parts = std::mem::take(&mut head.uri).into_parts();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = self.authority.clone();
        head.uri = Uri::from_parts(parts).unwrap_or_default();
        head.headers.insert(USER_AGENT, self.user_agent.clone());
        http::Request::from_parts(head, body)
    }
}
