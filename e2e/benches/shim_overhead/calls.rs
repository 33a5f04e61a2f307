//! The CRI calls the bench makes: populating sandboxes and the kubelet call mix.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use podward_api::cri;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_e2e::{BUSYBOX_IMAGE, PodSpec, TestNode};
use tonic::transport::Channel;

pub(crate) fn client(path: &Path) -> RuntimeServiceClient<Channel> {
    RuntimeServiceClient::new(podward_api::socket::channel(path.to_owned()))
        .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES)
}

pub(crate) fn sandbox_config(node: &TestNode, name: &str) -> cri::PodSandboxConfig {
    PodSpec::new(name)
        .namespace("bench")
        .uid(&format!("uid-{name}"))
        .sandbox_config(node)
        .expect("sandbox config")
}

/// A sandbox with `n` created (not started) containers, each with `annotation_bytes` of
/// annotations; returns (sandbox id, container ids).
pub(crate) async fn populate(
    node: &TestNode,
    via: &Path,
    name: &str,
    n: usize,
    annotation_bytes: usize,
) -> (String, Vec<String>) {
    let mut c = client(via);
    let config = sandbox_config(node, name);
    let sid = c
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let blob = "a".repeat(annotation_bytes);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let (labels, annotations) =
            kubelet_maps(name, i, (annotation_bytes > 0).then_some(blob.as_str()));
        let cfg = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: format!("c{i}"),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: BUSYBOX_IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["sleep".into(), "3600".into()],
            envs: vec![cri::KeyValue {
                key: "N".into(),
                value: i.to_string(),
            }],
            labels,
            annotations,
            log_path: format!("c{i}.log"),
            ..Default::default()
        };
        let id = c
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sid.clone(),
                config: Some(cfg),
                sandbox_config: Some(config.clone()),
            })
            .await
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        ids.push(id);
    }
    (sid, ids)
}

/// A container's labels and annotations as kubelet writes them (four and four, plus `blob`),
/// so that containerd writes their entries in any order, as on a node.
fn kubelet_maps(
    pod: &str,
    i: usize,
    blob: Option<&str>,
) -> (HashMap<String, String>, HashMap<String, String>) {
    use podward_api::labels as l;
    let owned = |pairs: &[(&str, String)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let labels = owned(&[
        (l::POD_NAME, pod.to_owned()),
        (l::POD_NAMESPACE, "bench".to_owned()),
        (l::POD_UID, format!("uid-{pod}")),
        (l::CONTAINER_NAME, format!("c{i}")),
    ]);
    let mut annotations = owned(&[
        (l::CONTAINER_HASH, format!("{:x}", 0x5eed_u64 + i as u64)),
        (l::CONTAINER_RESTART_COUNT, "0".to_owned()),
        (l::POD_TERMINATION_GRACE_PERIOD, "30".to_owned()),
        (
            l::CONTAINER_TERMINATION_MESSAGE_PATH,
            "/dev/termination-log".to_owned(),
        ),
    ]);
    if let Some(blob) = blob {
        annotations.insert("bench/blob".to_owned(), blob.to_owned());
    }
    (labels, annotations)
}

/// The calls of one mix, in order: [`mix`] makes them so, and so does the gRPC-Go client's
/// `bench` mode (`e2e/clients/go/main.go`); the figures by call rely on it.
pub(crate) const MIX: [&str; 5] = [
    "Version",
    "ListPodSandbox",
    "ListContainers",
    "ContainerStatus",
    "PodSandboxStatus",
];

/// One mix: the five calls ([`MIX`]); each call's latency, or the first failure.
pub(crate) async fn mix(
    c: &mut RuntimeServiceClient<Channel>,
    sid: &str,
    cid: &str,
    out: &mut Vec<Duration>,
) -> Result<(), tonic::Status> {
    let t = Instant::now();
    c.version(cri::VersionRequest::default()).await?;
    out.push(t.elapsed());
    let t = Instant::now();
    c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await?;
    out.push(t.elapsed());
    let t = Instant::now();
    let filter = cri::ContainerFilter {
        pod_sandbox_id: sid.to_owned(),
        ..Default::default()
    };
    c.list_containers(cri::ListContainersRequest {
        filter: Some(filter),
    })
    .await?;
    out.push(t.elapsed());
    let t = Instant::now();
    c.container_status(cri::ContainerStatusRequest {
        container_id: cid.to_owned(),
        verbose: false,
    })
    .await?;
    out.push(t.elapsed());
    let t = Instant::now();
    c.pod_sandbox_status(cri::PodSandboxStatusRequest {
        pod_sandbox_id: sid.to_owned(),
        verbose: false,
    })
    .await?;
    out.push(t.elapsed());
    Ok(())
}

/// [`MIXES_PER_ROUND`](crate::MIXES_PER_ROUND) mixes spread over `conc` tasks (each with a
/// connection of its own, dialled in the round) by the tonic client; latencies (five per mix,
/// in [`MIX`]'s order) and wall time. Failed mixes are counted in `failures` (and their
/// latencies left out). The gRPC-Go client measures its own way (`go_bench.rs`).
pub(crate) async fn round(
    path: &Path,
    conc: usize,
    sid: &str,
    cid: &str,
    failures: &Arc<AtomicU64>,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let mut c = client(path);
        let (sid, cid) = (sid.to_owned(), cid.to_owned());
        let per = crate::MIXES_PER_ROUND / conc.max(1);
        let failures = failures.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..per {
                if let Err(e) = mix(&mut c, &sid, &cid, &mut out).await {
                    eprintln!("bench call failed: {e:?}");
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    (all, started.elapsed())
}
