//! Shared fixtures of the shim's e2e tests (included with `#[path]` by each `shim_*.rs`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use podward_api::daemon::admin::Admin;
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::shim::v1::{Snapshot, SnapshotRequest};
use podward_api::test_util::eventually;
use podward_e2e::{Daemon, PodSpec, TestNode};
use tonic::transport::Channel;

/// The shim running in-process (its library `run_with`) in front of a node's containerd.
pub(crate) struct InProcShim {
    pub(crate) cri: PathBuf,
    pub(crate) control: PathBuf,
    pub(crate) admin: Admin,
    pub(crate) faults: podward_shim::fault::Faults,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl InProcShim {
    pub(crate) async fn start(node: &TestNode) -> Self {
        Self::start_with(node, |_| {}).await
    }

    pub(crate) async fn start_with(
        node: &TestNode,
        tweak: impl FnOnce(&mut podward_shim::config::Config),
    ) -> Self {
        Self::start_on(node, tweak, false).await
    }

    /// The shim on a thread and current-thread runtime of its own, as in production (where it
    /// is a process of one thread), so a test's own tasks do not share its thread.
    pub(crate) async fn start_on_own_thread(node: &TestNode) -> Self {
        Self::start_on(node, |_| {}, true).await
    }

    async fn start_on(
        node: &TestNode,
        tweak: impl FnOnce(&mut podward_shim::config::Config),
        own_thread: bool,
    ) -> Self {
        let cri = node.dir().join("shim-cri.sock");
        let control = node.dir().join("shim-control.sock");
        let mut config = podward_shim::config::Config {
            listen: cri.clone(),
            common: podward_api::daemon::config::Common {
                containerd_socket: node.containerd_socket(),
                ..podward_api::daemon::config::Common::with_admin_port(0)
            },
            control_socket: control.clone(),
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
        let run = async move {
            let shutdown = async {
                let _ = rx.await;
            };
            if let Err(e) = podward_shim::run_with(config, options, shutdown).await {
                panic!("in-process shim failed: {e}");
            }
        };
        let task = if own_thread {
            tokio::task::spawn_blocking(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("shim runtime")
                    .block_on(run);
            })
        } else {
            tokio::spawn(run)
        };
        let shim = Self {
            cri,
            control,
            admin,
            faults,
            stop: Some(stop),
            task: Some(task),
        };
        let admin = shim.admin.clone();
        eventually("in-process shim ready", Duration::from_secs(20), || {
            let ready = admin.readiness.get();
            async move { ready }
        })
        .await;
        wait_rebuilt(&shim.control).await;
        shim
    }

    pub(crate) fn metrics_text(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.admin.registry.gather())
            .expect("encode metrics")
    }

    /// Shuts the shim down and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for InProcShim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// The container every conformance run (each client stack) creates: busybox `sleep 3600` with
/// one env var and kubelet's container-name label.
pub(crate) fn container_config() -> podward_api::cri::ContainerConfig {
    use podward_api::cri;
    let mut labels = std::collections::HashMap::new();
    labels.insert("io.kubernetes.container.name".to_owned(), "main".to_owned());
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: podward_e2e::BUSYBOX_IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        envs: vec![cri::KeyValue {
            key: "CONF".into(),
            value: "yes".into(),
        }],
        labels,
        log_path: "main/0.log".into(),
        ..Default::default()
    }
}

/// Polls a synchronous condition until it holds (fails the test after `timeout`).
pub(crate) async fn wait_until(what: &str, timeout: Duration, cond: impl Fn() -> bool) {
    eventually(what, timeout, || {
        let ok = cond();
        async move { ok }
    })
    .await;
}

/// A Lifecycle client on the control socket.
pub(crate) fn lifecycle(control: &Path) -> LifecycleClient<Channel> {
    LifecycleClient::new(podward_api::socket::channel(control.to_owned()))
        .max_decoding_message_size(podward_api::limits::API_MESSAGE_BYTES)
}

/// The index once the shim is connected to containerd.
pub(crate) async fn snapshot(control: &Path) -> Snapshot {
    lifecycle(control)
        .snapshot(SnapshotRequest {})
        .await
        .expect("Snapshot")
        .into_inner()
}

/// Waits until the shim reports containerd connected (its first rebuild is then under way;
/// a following List through the shim or the rebuild fills the index).
pub(crate) async fn wait_rebuilt(control: &Path) {
    let control = control.to_owned();
    eventually(
        "shim connected to containerd",
        Duration::from_secs(20),
        || {
            let control = control.clone();
            async move {
                match lifecycle(&control).snapshot(SnapshotRequest {}).await {
                    Ok(s) => s.into_inner().runtime_connected,
                    Err(_) => false,
                }
            }
        },
    )
    .await;
}

/// kubelet's gRPC-Go sets no SETTINGS_MAX_HEADER_LIST_SIZE (no limit): containerd then sends
/// trailers of any length. tonic's default (16 KiB) would make containerd reset the stream
/// instead, so the tests' kubelet-like client lifts it as kubelet's does.
pub(crate) const CLIENT_MAX_HEADER_LIST: u32 = 64 << 20;

/// One HTTP/2 connection to `socket`, as kubelet keeps to its runtime (every call on it).
pub(crate) async fn one_connection(
    socket: &Path,
) -> podward_api::cri::runtime_service_client::RuntimeServiceClient<Channel> {
    let path = socket.to_owned();
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .http2_max_header_list_size(CLIENT_MAX_HEADER_LIST)
        .connect_with_connector(tower::service_fn(move |_| {
            let p = path.clone();
            async move {
                tokio::net::UnixStream::connect(p)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .expect("connect");
    podward_api::cri::runtime_service_client::RuntimeServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
}

/// The value of an unlabelled counter or gauge in the shim's metrics text (0 when absent).
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Replaces every run of 32+ hex digits (container/sandbox/image IDs, exec tokens are shorter)
/// with `<id>`, so outcomes of two runs compare.
pub(crate) fn mask_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut run = String::new();
    for ch in s.chars() {
        if ch.is_ascii_hexdigit() {
            run.push(ch);
            continue;
        }
        flush(&mut out, &mut run);
        out.push(ch);
    }
    flush(&mut out, &mut run);
    out
}

fn flush(out: &mut String, run: &mut String) {
    if run.len() >= 32 {
        out.push_str("<id>");
    } else {
        out.push_str(run);
    }
    run.clear();
}

/// A raw gRPC unary call of `path` (any method, known or not) with an empty request.
pub(crate) async fn call_path(socket: &Path, path: &'static str) -> Result<(), tonic::Status> {
    let ch = podward_api::socket::connect(socket.to_owned())
        .await
        .expect("connect");
    let mut g = tonic::client::Grpc::new(ch);
    g.ready().await.expect("ready");
    g.unary(
        tonic::Request::new(podward_api::cri::VersionRequest::default()),
        http::uri::PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::<
            podward_api::cri::VersionRequest,
            podward_api::cri::VersionResponse,
        >::default(),
    )
    .await
    .map(|_| ())
}

/// The `podward-shim` binary on `node` (its CRI and control sockets in the node's directory,
/// its admin endpoint on `admin`), healthy.
pub(crate) async fn spawn_shim(node: &TestNode, admin: SocketAddr) -> Daemon {
    let dir = node.dir();
    let (cri, ctl) = (dir.join("shim.cri.sock"), dir.join("shim.ctl.sock"));
    let containerd = node.containerd_socket();
    let admin_s = admin.to_string();
    let args = [
        "--listen",
        cri.to_str().expect("utf8"),
        "--control-socket",
        ctl.to_str().expect("utf8"),
        "--containerd-socket",
        containerd.to_str().expect("utf8"),
        "--admin-addr",
        &admin_s,
    ];
    let d = Daemon::spawn("podward-shim", &args)
        .await
        .expect("spawn shim");
    d.wait_healthy(admin, Duration::from_secs(30))
        .await
        .expect("shim healthy");
    d
}

/// A RunPodSandbox of pod `name` (UID `uid-{name}`) on `node`.
pub(crate) fn sandbox_request(
    node: &TestNode,
    name: &str,
) -> podward_api::cri::RunPodSandboxRequest {
    podward_api::cri::RunPodSandboxRequest {
        config: Some(
            PodSpec::new(name)
                .uid(&format!("uid-{name}"))
                .sandbox_config(node)
                .expect("sandbox config"),
        ),
        runtime_handler: String::new(),
    }
}
