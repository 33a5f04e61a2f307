//! gRPC probe acceptance item G1 against real tonic servers on 127.0.0.1.

#[path = "support/handlers.rs"]
mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, ProbeType};
use support::{prober, spec, target};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus as ReportStatus;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

async fn serve(
    router: tonic::transport::server::Router,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = router
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    (addr, task)
}

/// A health service answering fixed statuses per service name, recording user agents.
#[derive(Default, Clone)]
struct Scripted {
    statuses: HashMap<String, ServingStatus>,
    delay: Duration,
    agents: Arc<Mutex<Vec<String>>>,
    /// Bytes of an `x-pad` metadata entry on every answer (none if 0).
    pad: usize,
}

#[tonic::async_trait]
impl Health for Scripted {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let ua = req
            .metadata()
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        self.agents.lock().push(ua);
        tokio::time::sleep(self.delay).await;
        let status = self
            .statuses
            .get(&req.get_ref().service)
            .copied()
            .ok_or_else(|| Status::not_found("unknown service"))?;
        let mut resp = Response::new(HealthCheckResponse {
            status: status.into(),
        });
        if self.pad > 0 {
            let v = "a"
                .repeat(self.pad)
                .parse()
                .map_err(|_| Status::internal("pad"))?;
            resp.metadata_mut().insert("x-pad", v);
        }
        Ok(resp)
    }

    type WatchStream = futures::stream::BoxStream<'static, Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("watch"))
    }
}

async fn probe(port: u16, service: Option<&str>, timeout: u64) -> Outcome {
    let handler = Handler::Grpc {
        port,
        service: service.map(str::to_owned),
    };
    prober()
        .probe(
            ProbeType::Liveness,
            &spec(handler, timeout),
            &target(&[], &[]),
        )
        .await
}

fn failure(output: impl Into<String>) -> Outcome {
    Outcome::Failure(output.into())
}

#[tokio::test]
async fn g1_tonic_health_serving_and_not_serving() {
    let (reporter, svc) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ReportStatus::Serving).await;
    reporter
        .set_service_status("down", ReportStatus::NotServing)
        .await;
    let (addr, task) = serve(tonic::transport::Server::builder().add_service(svc)).await;
    assert_eq!(
        probe(addr.port(), None, 1).await,
        Outcome::Success("service healthy".into())
    );
    assert_eq!(
        probe(addr.port(), Some("down"), 1).await,
        failure(r#"service unhealthy (responded with "NOT_SERVING")"#)
    );
    // tonic-health (like grpc-go's server) answers NotFound for a service it does not know.
    assert_eq!(
        probe(addr.port(), Some("nope"), 1).await,
        failure(
            "error: health rpc probe failed: rpc error: code = NotFound desc = service not registered"
        )
    );
    task.abort();
}

#[tokio::test]
async fn g1_unknown_and_service_unknown_are_failures_and_user_agent_is_kube_probe() {
    let scripted = Scripted {
        statuses: [
            ("u".to_owned(), ServingStatus::Unknown),
            ("su".to_owned(), ServingStatus::ServiceUnknown),
        ]
        .into(),
        ..Default::default()
    };
    let agents = scripted.agents.clone();
    let (addr, task) =
        serve(tonic::transport::Server::builder().add_service(HealthServer::new(scripted))).await;
    assert_eq!(
        probe(addr.port(), Some("u"), 1).await,
        failure(r#"service unhealthy (responded with "UNKNOWN")"#)
    );
    assert_eq!(
        probe(addr.port(), Some("su"), 1).await,
        failure(r#"service unhealthy (responded with "SERVICE_UNKNOWN")"#)
    );
    let agents = agents.lock().clone();
    assert!(
        agents.iter().all(|a| a.starts_with("kube-probe/1.33")),
        "{agents:?}"
    );
    task.abort();
}

#[tokio::test]
async fn g1_server_without_health_service_is_unimplemented_failure() {
    let (addr, task) =
        serve(tonic::transport::Server::builder().add_routes(tonic::service::Routes::default()))
            .await;
    match probe(addr.port(), None, 1).await {
        Outcome::Failure(output) => assert!(
            output.starts_with("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): "),
            "{output}"
        ),
        other => panic!("{other:?}"),
    }
    task.abort();
}

#[tokio::test]
async fn g1_slow_check_times_out_with_one_deadline() {
    let scripted = Scripted {
        statuses: [(String::new(), ServingStatus::Serving)].into(),
        delay: Duration::from_secs(3),
        ..Default::default()
    };
    let (addr, task) =
        serve(tonic::transport::Server::builder().add_service(HealthServer::new(scripted))).await;
    let started = Instant::now();
    assert_eq!(
        probe(addr.port(), None, 1).await,
        failure("timeout: health rpc did not complete within 1s")
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    task.abort();
}

#[tokio::test]
async fn g1_refused_port_is_a_connect_timeout_like_grpc_go() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let started = Instant::now();
    assert_eq!(
        probe(port, None, 1).await,
        failure(format!(
            r#"timeout: failed to connect service "127.0.0.1:{port}" within 1s: context deadline exceeded"#
        ))
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
        "{took:?}"
    );
}

#[tokio::test]
async fn g1_large_response_metadata_is_read_as_grpc_go_reads_it() {
    // grpc-go's client takes header lists up to 16 MiB; hyper's default is 16 KiB.
    let scripted = Scripted {
        statuses: [(String::new(), ServingStatus::Serving)].into(),
        pad: 100_000,
        ..Default::default()
    };
    let (addr, task) =
        serve(tonic::transport::Server::builder().add_service(HealthServer::new(scripted))).await;
    assert_eq!(
        probe(addr.port(), None, 2).await,
        Outcome::Success("service healthy".into())
    );
    task.abort();
}
