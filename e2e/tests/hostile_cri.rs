//! Hostile CRI content on a real containerd: a sandbox whose `RunPodSandbox` carried invalid
//! UTF-8 in an annotation value (containerd stores it: Go's protobuf does not check `string`
//! fields; no typed client can send it, so the request goes out as raw bytes). One such object
//! must cost that value — never the shim's rebuilt index, the prober's pods, or the
//! housekeeper's view of the runtime.

#[path = "support/housekeeper.rs"]
mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use podward_api::cri;
use podward_api::labels;
use podward_api::prober::v1 as api;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::shim::v1::SnapshotRequest;
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::test_util::eventually;
use podward_e2e::{ContainerSpec, Daemon, Driver, PodSpec, TestNode, free_port};
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::prost as prost_message;
use tonic_prost::prost::bytes::BufMut;

/// What the bad annotation value is written as in the typed request, then overwritten with
/// [`INVALID_UTF8`] on the wire (same length, so every length prefix stays right).
const MARK: &str = "MARK-MARK";
const INVALID_UTF8: &[u8] = b"caf\xe9\xff\xfe\xc3(!";
/// What every podward daemon makes of it: each invalid sequence becomes U+FFFD.
const REPAIRED: &str = "caf\u{fffd}\u{fffd}\u{fffd}\u{fffd}(!";

fn s(p: &Path) -> String {
    p.to_str().expect("utf8 path").to_owned()
}

/// Sends already-encoded request bytes; decodes the answer with prost.
struct RawCodec<R>(std::marker::PhantomData<R>);

struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl<R: prost_message::Message + Default + Send + 'static> Codec for RawCodec<R> {
    type Encode = Vec<u8>;
    type Decode = R;
    type Encoder = RawEncoder;
    type Decoder = tonic_prost::ProstDecoder<R>;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// Runs a pod like kubelet would, except that its `RunPodSandbox` carries `evil`'s value as
/// invalid UTF-8, and its container runs `sleep` with kubelet's labels.
async fn run_poisoned_pod(node: &TestNode, spec: &PodSpec) -> String {
    let config = spec.sandbox_config(node).expect("sandbox config");
    let req = cri::RunPodSandboxRequest {
        config: Some(config.clone()),
        runtime_handler: String::new(),
    };
    let mut bytes = prost_message::Message::encode_to_vec(&req);
    let at = bytes
        .windows(MARK.len())
        .position(|w| w == MARK.as_bytes())
        .expect("marker");
    bytes[at..at + MARK.len()].copy_from_slice(INVALID_UTF8);
    let ch = podward_api::socket::connect(node.containerd_socket())
        .await
        .expect("connect containerd");
    let mut g = tonic::client::Grpc::new(ch);
    g.ready().await.expect("ready");
    let sandbox_id = g
        .unary(
            tonic::Request::new(bytes),
            http::uri::PathAndQuery::from_static("/runtime.v1.RuntimeService/RunPodSandbox"),
            RawCodec::<cri::RunPodSandboxResponse>(std::marker::PhantomData),
        )
        .await
        .expect("containerd takes a RunPodSandbox with invalid UTF-8 in an annotation")
        .into_inner()
        .pod_sandbox_id;
    let mut client = node.runtime_client().await;
    let container = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: podward_e2e::BUSYBOX_IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        labels: HashMap::from([
            (labels::POD_UID.to_owned(), spec.uid.clone()),
            (labels::POD_NAME.to_owned(), spec.name.clone()),
            (labels::POD_NAMESPACE.to_owned(), spec.namespace.clone()),
            (labels::CONTAINER_NAME.to_owned(), "app".to_owned()),
        ]),
        log_path: "app/0.log".into(),
        ..Default::default()
    };
    let id = client
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(container),
            sandbox_config: Some(config),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    client
        .start_container(cri::StartContainerRequest { container_id: id })
        .await
        .expect("StartContainer");
    sandbox_id
}

const PROBES: &str =
    r#"{"app":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

/// A clean pod and a poisoned one, both with a readiness probe, started straight on containerd
/// (no shim yet: what a shim restart finds).
async fn two_pods(node: &TestNode) -> (podward_e2e::Pod, PodSpec) {
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let clean = driver
        .run_pod(
            node,
            PodSpec::new("clean")
                .annotation(labels::PODWARD_PROBES, PROBES)
                .container(ContainerSpec::new("app", &["sleep", "3600"])),
        )
        .await
        .expect("clean pod");
    let evil = PodSpec::new("evil")
        .annotation(labels::PODWARD_PROBES, PROBES)
        .annotation("podward.io/evil", MARK);
    run_poisoned_pod(node, &evil).await;
    (clean, evil)
}

async fn spawn(name: &str, args: &[&str], admin: SocketAddr) -> Daemon {
    let d = Daemon::spawn(name, args).await.expect("spawn");
    d.wait_healthy(admin, Duration::from_secs(60))
        .await
        .expect("healthy");
    d
}

async fn ready(admin: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(admin).await else {
        return false;
    };
    if s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").await.is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    buf.starts_with(b"HTTP/1.0 200") || buf.starts_with(b"HTTP/1.1 200")
}

async fn prober_ready_pods(socket: &Path) -> Vec<String> {
    let mut c = ProberClient::new(podward_api::socket::channel(socket));
    let Ok(st) = c.status(api::StatusRequest::default()).await else {
        return Vec::new();
    };
    let mut names: Vec<String> = st
        .into_inner()
        .pods
        .into_iter()
        .filter(|p| p.containers.iter().any(|c| c.ready))
        .map(|p| p.pod_name)
        .collect();
    names.sort();
    names
}

async fn spawn_prober(node: &TestNode, shim_ctl: &Path, admin: SocketAddr) -> (Daemon, String) {
    let socket = node.dir().join("prober.sock");
    let d = spawn(
        "podward-prober",
        &[
            "--socket",
            &s(&socket),
            "--shim-socket",
            &s(shim_ctl),
            "--containerd-socket",
            &s(&node.containerd_socket()),
            "--node-ip",
            "127.0.0.1",
            "--poll-interval-seconds",
            "1",
            "--admin-addr",
            &admin.to_string(),
        ],
        admin,
    )
    .await;
    (d, s(&socket))
}

#[tokio::test]
async fn one_invalid_utf8_annotation_costs_that_value_never_the_shims_rebuilt_index_or_the_probers_pods()
 {
    let node = TestNode::start().await.expect("node");
    let (clean, evil) = two_pods(&node).await;

    // The shim starts after both sandboxes exist: its index comes from the rebuild alone.
    let dir = node.dir().to_owned();
    let (cri_sock, ctl) = (dir.join("shim.cri.sock"), dir.join("shim.ctl.sock"));
    let shim_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let _shim = spawn(
        "podward-shim",
        &[
            "--listen",
            &s(&cri_sock),
            "--control-socket",
            &s(&ctl),
            "--containerd-socket",
            &s(&node.containerd_socket()),
            "--admin-addr",
            &shim_admin.to_string(),
        ],
        shim_admin,
    )
    .await;
    eventually(
        "the shim's rebuilt index has both pods",
        Duration::from_secs(30),
        || {
            let ctl = ctl.clone();
            async move {
                let mut c = LifecycleClient::new(podward_api::socket::channel(ctl));
                let Ok(snap) = c.snapshot(SnapshotRequest {}).await else {
                    return false;
                };
                let snap = snap.into_inner();
                snap.sandboxes.len() == 2 && snap.containers.len() == 2
            }
        },
    )
    .await;
    let snap = LifecycleClient::new(podward_api::socket::channel(ctl.clone()))
        .snapshot(SnapshotRequest {})
        .await
        .expect("snapshot")
        .into_inner();
    let bad = snap
        .sandboxes
        .iter()
        .find(|s| s.uid == evil.uid)
        .expect("the poisoned sandbox is in the index");
    assert_eq!(bad.annotations["podward.io/evil"], REPAIRED);
    assert_eq!(bad.annotations[labels::PODWARD_PROBES], PROBES);
    assert!(snap.sandboxes.iter().any(|s| s.uid == clean.uid()));
    assert!(
        ready(shim_admin).await,
        "the shim is ready once its index is whole"
    );
    let metrics = scrape(shim_admin).await;
    assert!(
        metrics.contains("podward_shim_cri_repairs_total{action=\"replaced\"}"),
        "repairs are counted:\n{metrics}"
    );

    // kubelet's relist through the shim (the observe path) keeps the object too.
    let mut through = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(cri_sock.clone()),
    );
    let relisted = through
        .list_containers(cri::ListContainersRequest::default())
        .await
        .expect("ListContainers through the shim")
        .into_inner();
    assert_eq!(relisted.containers.len(), 2);

    // The prober follows the shim and probes both pods.
    let prober_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let (_prober, prober_socket) = spawn_prober(&node, &ctl, prober_admin).await;
    both_pods_ready(&prober_socket).await;
    assert!(ready(prober_admin).await);
}

/// Waits until the prober on `prober_socket` has both pods (the clean and the poisoned one)
/// ready.
async fn both_pods_ready(prober_socket: &str) {
    eventually(
        "both pods ready in the prober",
        Duration::from_secs(30),
        || async move { prober_ready_pods(Path::new(prober_socket)).await == ["clean", "evil"] },
    )
    .await;
}

#[tokio::test]
async fn the_prober_reading_containerd_directly_keeps_every_pod_despite_an_invalid_annotation_and_is_not_ready_while_blind()
 {
    let mut node = TestNode::start().await.expect("node");
    let _pods = two_pods(&node).await;
    let prober_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    // No shim at all: the prober polls containerd's CRI.
    let absent = node.dir().join("no-shim.sock");
    let (_prober, prober_socket) = spawn_prober(&node, &absent, prober_admin).await;
    both_pods_ready(&prober_socket).await;
    eventually("the prober is ready", Duration::from_secs(10), || {
        ready(prober_admin)
    })
    .await;
    // Neither the shim nor containerd: the prober cannot see the node, so it is not ready.
    node.stop_containerd().await;
    eventually(
        "the blind prober is not ready",
        Duration::from_secs(20),
        || async { !ready(prober_admin).await },
    )
    .await;
    node.start_containerd().await.expect("containerd again");
    eventually("the prober is ready again", Duration::from_secs(30), || {
        ready(prober_admin)
    })
    .await;
}

#[tokio::test]
async fn the_housekeepers_runtime_view_keeps_every_sandbox_despite_an_invalid_annotation() {
    let node = TestNode::start().await.expect("node");
    let (clean, evil) = two_pods(&node).await;
    let client = podward_housekeeper::sources::runtime::RuntimeClient::new(
        &node.containerd_socket(),
        Duration::from_secs(10),
    );
    let view = client.list().await.expect("the runtime source reads");
    let uids = view.uids();
    assert!(uids.contains(clean.uid()), "{view:?}");
    assert!(uids.contains(&evil.uid), "{view:?}");
    assert_eq!(view.sandboxes.len(), 2);
    assert_eq!(view.containers.len(), 2);
}

#[tokio::test]
async fn a_housekeeping_pass_with_an_invalid_annotation_on_the_node_still_cleans_a_real_orphan() {
    const ORPHAN: &str = "0bad0000-aaaa-4bbb-8ccc-0000000000f1";
    const EVIL: &str = "0e0e0000-aaaa-4bbb-8ccc-0000000000f2";
    podward_e2e::init_test_logging();
    let node = TestNode::start().await.expect("node");
    let cfg = support::config(&node);
    // The poisoned pod, live, in a kubelet-style cgroup, with its pod and log dirs.
    let evil_cg = support::PodCgroup::create(&node, EVIL);
    let evil = PodSpec::new("evil")
        .uid(EVIL)
        .cgroup_parent(&format!("/{}", evil_cg.rel))
        .annotation("podward.io/evil", MARK);
    run_poisoned_pod(&node, &evil).await;
    let (evil_dir, evil_log) = support::leave_dirs(&cfg, EVIL);
    // A real orphan: a pod cgroup with a process in it, its pod dir and log dir.
    let mut orphan_cg = support::PodCgroup::create(&node, ORPHAN);
    let pid = orphan_cg.spawn_sleeper();
    let (orphan_dir, orphan_log) = support::leave_dirs(&cfg, ORPHAN);

    let rec = podward_housekeeper::run::node_reconciler(&cfg);
    support::act_until_orphan_removed(&rec, ORPHAN, |p| {
        assert!(
            p.sources_ok,
            "one invalid annotation failed a source: {:?}",
            p.sources
        );
    })
    .await;
    eventually("the sleeper to die", Duration::from_secs(10), async || {
        !orphan_cg.alive(pid)
    })
    .await;
    assert!(!orphan_dir.exists() && !orphan_log.exists());
    assert!(
        evil_dir.exists() && evil_log.exists() && evil_cg.paths().iter().all(|p| p.exists()),
        "the poisoned pod is live: nothing of it goes"
    );
}

/// The housekeeper's API socket has the shared gRPC bounds: a client that
/// never sends the HTTP/2 preface is closed at the handshake deadline, and answers nothing.
#[tokio::test]
async fn the_housekeepers_api_socket_closes_a_client_that_never_speaks() {
    use tokio::io::AsyncReadExt;

    let node = TestNode::start().await.expect("node");
    let cfg = support::config(&node);
    let socket = cfg.socket.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(podward_housekeeper::run(cfg, async move {
        let _ = stop_rx.await;
    }));
    eventually(
        "the housekeeper socket",
        Duration::from_secs(30),
        async || tokio::net::UnixStream::connect(&socket).await.is_ok(),
    )
    .await;
    let mut silent = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let mut buf = [0u8; 64];
    let deadline = podward_api::daemon::grpc::HANDSHAKE_TIMEOUT * 2;
    let read = tokio::time::timeout(deadline, silent.read(&mut buf))
        .await
        .expect("the housekeeper closed a connection that sent no preface");
    // Without the bound, the HTTP/2 server would have written its SETTINGS frame at once.
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let _ = stop_tx.send(());
    let _ = daemon.await;
}

async fn scrape(admin: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin)
        .await
        .expect("connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("scrape in time")
        .expect("read");
    String::from_utf8_lossy(&buf).into_owned()
}
