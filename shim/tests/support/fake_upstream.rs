//! Fixtures: a fake containerd (plain HTTP/2, canned gRPC frames) and the shim in-process.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podward_api::cri;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::daemon::admin::Admin;
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::test_util::eventually;
use prost::Message;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

type Body = StreamBody<ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

fn frame(msg: &impl Message) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(0);
    b.put_u32(u32::try_from(msg.encoded_len()).expect("small"));
    msg.encode(&mut b).expect("encode");
    b.freeze()
}

fn unframe<M: Message + Default>(b: &[u8]) -> M {
    M::decode(&b[5..]).expect("decode")
}

fn trailers(status: &str, extra: Option<(&'static str, HeaderValue)>) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert(
        "grpc-status",
        HeaderValue::from_str(status).expect("status"),
    );
    if let Some((k, v)) = extra {
        t.insert(k, v);
    }
    t
}

/// A fake containerd on a unix socket; dropping it closes every connection.
pub(crate) struct FakeUpstream {
    socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
    containers: Arc<AtomicU32>,
}

impl FakeUpstream {
    pub(crate) async fn start(socket: &Path) -> Self {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).expect("bind fake upstream");
        let containers = Arc::new(AtomicU32::new(0));
        let listed = containers.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let listed = listed.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let listed = listed.load(Ordering::Relaxed);
                        async move { Ok::<_, Infallible>(answer(req, listed).await) }
                    });
                    // Header lists as large as gRPC-Go servers take (CONTINUATION in tests).
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .max_header_list_size(1 << 20)
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        Self {
            socket: socket.to_owned(),
            task,
            containers,
        }
    }

    /// From now on, `ListContainers` answers `n` containers (`c<n>-<i>`, each with a 3 KiB
    /// label) instead of none.
    pub(crate) fn set_containers(&self, n: u32) {
        self.containers.store(n, Ordering::Relaxed);
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn listed_containers(n: u32) -> cri::ListContainersResponse {
    let containers = (0..n)
        .map(|i| cri::Container {
            id: format!("c{n}-{i}"),
            pod_sandbox_id: "sb-listed".into(),
            metadata: Some(cri::ContainerMetadata {
                name: format!("c{i}"),
                attempt: 0,
            }),
            state: cri::ContainerState::ContainerRunning as i32,
            labels: [("blob".to_owned(), "x".repeat(3 << 10))].into(),
            ..Default::default()
        })
        .collect();
    cri::ListContainersResponse { containers }
}

async fn answer(req: Request<Incoming>, containers: u32) -> Response<Body> {
    let (tx, rx) = mpsc::channel(16);
    let path = req.uri().path().to_owned();
    let echo = req.headers().get("x-echo").cloned();
    let mut resp = Response::new(StreamBody::new(ReceiverStream::new(rx)));
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    match path.as_str() {
        "/runtime.v1.RuntimeService/Version" => {
            let body = req.into_body().collect().await.expect("body").to_bytes();
            let q: cri::VersionRequest = unframe(&body);
            let a = cri::VersionResponse {
                version: q.version,
                runtime_name: "fake".into(),
                ..Default::default()
            };
            let _ = tx.send(Ok(Frame::data(frame(&a)))).await;
            let _ = tx
                .send(Ok(Frame::trailers(trailers(
                    "0",
                    echo.map(|v| ("x-echoed", v)),
                ))))
                .await;
        }
        "/runtime.v1.RuntimeService/RunPodSandbox" => {
            let body = req.into_body().collect().await.expect("body").to_bytes();
            let q: cri::RunPodSandboxRequest = unframe(&body);
            let name = q
                .config
                .and_then(|c| c.metadata)
                .map(|m| m.name)
                .unwrap_or_default();
            let a = cri::RunPodSandboxResponse {
                pod_sandbox_id: format!("sb-{name}"),
            };
            let _ = tx.send(Ok(Frame::data(frame(&a)))).await;
            let _ = tx.send(Ok(Frame::trailers(trailers("0", None)))).await;
        }
        // The shim's index rebuild (readiness waits for it): an empty node.
        "/runtime.v1.RuntimeService/ListPodSandbox" => {
            let _ = req.into_body().collect().await;
            let a = cri::ListPodSandboxResponse::default();
            let _ = tx.send(Ok(Frame::data(frame(&a)))).await;
            let _ = tx.send(Ok(Frame::trailers(trailers("0", None)))).await;
        }
        "/runtime.v1.RuntimeService/ListContainers" => {
            let _ = req.into_body().collect().await;
            let a = listed_containers(containers);
            let _ = tx.send(Ok(Frame::data(frame(&a)))).await;
            let _ = tx.send(Ok(Frame::trailers(trailers("0", None)))).await;
        }
        "/test.Echo/Stream" => {
            let mut body = req.into_body();
            tokio::spawn(async move {
                while let Some(Ok(f)) = body.frame().await {
                    if let Ok(d) = f.into_data()
                        && tx.send(Ok(Frame::data(d))).await.is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send(Ok(Frame::trailers(trailers("0", None)))).await;
            });
        }
        other => {
            // Trailers-only, as grpc-go answers an unknown method.
            drop(tx);
            let h = resp.headers_mut();
            h.insert("grpc-status", HeaderValue::from_static("12"));
            h.insert(
                "grpc-message",
                HeaderValue::from_str(&format!("unknown method {other}")).expect("ascii"),
            );
        }
    }
    resp
}

/// The value on the first line of `text` starting with `line_start` (0 when there is none).
pub(crate) fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The shim running in this test's runtime; dropping it shuts it down.
pub(crate) struct TestShim {
    dir: PathBuf,
    admin: Admin,
    #[allow(dead_code)]
    pub(crate) faults: podward_shim::fault::Faults,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestShim {
    pub(crate) async fn start(dir: &Path) -> Self {
        Self::start_with(dir, |_| {}).await
    }

    pub(crate) async fn start_with(
        dir: &Path,
        tweak: impl FnOnce(&mut podward_shim::config::Config),
    ) -> Self {
        let mut config = podward_shim::config::Config {
            listen: dir.join("cri.sock"),
            control_socket: dir.join("shim.sock"),
            common: podward_api::daemon::config::Common {
                containerd_socket: dir.join("containerd.sock"),
                ..podward_api::daemon::config::Common::with_admin_port(0)
            },
            ..Default::default()
        };
        tweak(&mut config);
        let admin = Admin::new();
        let faults = podward_shim::fault::Faults::new();
        let options = podward_shim::Options {
            admin: admin.clone(),
            faults: faults.clone(),
            ..Default::default()
        };
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            podward_shim::run_with(config, options, async {
                let _ = rx.await;
            })
            .await
            .expect("shim runs");
        });
        let shim = Self {
            dir: dir.to_owned(),
            admin,
            faults,
            stop: Some(stop),
            task,
        };
        let (cri, ctl) = (shim.cri_socket(), dir.join("shim.sock"));
        eventually("shim sockets", Duration::from_secs(10), || async {
            tokio::net::UnixStream::connect(&cri).await.is_ok()
                && tokio::net::UnixStream::connect(&ctl).await.is_ok()
        })
        .await;
        shim
    }

    pub(crate) fn cri_socket(&self) -> PathBuf {
        self.dir.join("cri.sock")
    }

    pub(crate) async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(podward_api::socket::channel(self.cri_socket()))
    }

    pub(crate) async fn lifecycle(&self) -> LifecycleClient<Channel> {
        LifecycleClient::new(podward_api::socket::channel(self.dir.join("shim.sock")))
    }

    pub(crate) fn ready(&self) -> bool {
        self.admin.readiness.get()
    }

    pub(crate) fn metrics_text(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.admin.registry.gather())
            .expect("encode")
    }

    /// The value on the first metrics line starting with `line_start` (0 when there is none).
    pub(crate) fn metric(&self, line_start: &str) -> f64 {
        metric(&self.metrics_text(), line_start)
    }
}

impl Drop for TestShim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

pub(crate) fn run_request(name: &str) -> tonic::Request<cri::RunPodSandboxRequest> {
    tonic::Request::new(cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_owned(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    })
}

async fn grpc(socket: &Path) -> tonic::client::Grpc<Channel> {
    let ch = podward_api::socket::connect(socket.to_owned())
        .await
        .expect("connect");
    tonic::client::Grpc::new(ch)
}

/// `runtime.v1.RuntimeService/DoesNotExist`, a method no server has.
pub(crate) async fn call_unknown(socket: &Path) -> Result<cri::VersionResponse, tonic::Status> {
    let mut g = grpc(socket).await;
    g.ready().await.expect("ready");
    g.unary(
        tonic::Request::new(cri::VersionRequest::default()),
        http::uri::PathAndQuery::from_static("/runtime.v1.RuntimeService/DoesNotExist"),
        tonic_prost::ProstCodec::<cri::VersionRequest, cri::VersionResponse>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// A bidirectional stream on `/test.Echo/Stream`.
pub(crate) async fn echo_stream(
    socket: &Path,
    rx: mpsc::Receiver<cri::VersionRequest>,
) -> futures::stream::BoxStream<'static, Result<cri::VersionRequest, tonic::Status>> {
    let mut g = grpc(socket).await;
    g.ready().await.expect("ready");
    let resp = g
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static("/test.Echo/Stream"),
            tonic_prost::ProstCodec::<cri::VersionRequest, cri::VersionRequest>::default(),
        )
        .await
        .expect("stream opens");
    resp.into_inner().boxed()
}
