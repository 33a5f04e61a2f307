//! The container images, built for real and run the way the chart runs them:
//! - `deploy/build-images.sh` builds the three images with buildah (vfs storage, chroot
//!   isolation, FROM scratch) from the debug binaries and pushes them to the test node's loopback
//!   registry (Debian `docker-registry`);
//! - the chart is rendered by Helm's engine with that registry and tag, the shim installer on;
//! - each rendered container is pulled through CRI `PullImage` and started on the real containerd
//!   with the rendered command, args, env, mounts and security context (read-only root filesystem,
//!   dropped and added capabilities, RuntimeDefault seccomp, no_new_privs, host network and PID),
//!   every hostPath mapped to a directory of the test (the cgroup tree too: an empty one).
//!
//! Then: the installer init container exits 0 having written the shim and its units into the
//! "host" directories; the prober and the housekeeper answer `/healthz` and `/readyz`, export
//! their `*_build_info`, and create their sockets in the shared hostPath; the shim, run from the
//! installer image, answers `/healthz`, forwards CRI to containerd, and the prober in its
//! container switches to following it.
//!
//! Needs root, containerd, runc, buildah, docker-registry and skopeo (scripts/install-deps.sh).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use podward_api::cri::{
    Capability, ContainerConfig, ContainerMetadata, ContainerStatusRequest, CreateContainerRequest,
    ImageSpec, Int64Value, KeyValue, LinuxContainerConfig, LinuxContainerSecurityContext, Mount,
    MountPropagation, NamespaceMode, NamespaceOption, PodSandboxConfig, PullImageRequest,
    RunPodSandboxRequest, SecurityProfile, StartContainerRequest, VersionRequest,
    security_profile::ProfileType,
};
use podward_api::test_util::eventually;
use podward_e2e::{Driver, PodSpec, TestNode, free_port};
use serde_json::{Value, json};

#[path = "support/chart.rs"]
mod support;
use support::{Render, container, repo, strs};

/// kubelet expands `$(PODWARD_HOST_IP)` from the downward API; these pods share the host network,
/// whose address here is loopback.
const HOST_IP: &str = "127.0.0.1";

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// `GET path` on a loopback admin endpoint: (status, body).
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let text = podward_e2e::http_get(addr, path, Duration::from_secs(5))
        .await
        .ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// Where the test puts a chart hostPath: `<node>/host<path>`.
fn host_dir(node: &TestNode, host_path: &str) -> PathBuf {
    node.dir()
        .join("host")
        .join(host_path.trim_start_matches('/'))
}

/// Test directories bind-mounted onto themselves as shared mounts, unmounted on drop. A
/// `HostToContainer` mount needs a shared (or slave) source, as every path is on a systemd host;
/// this machine's root is private.
#[derive(Default)]
struct SharedMounts(Vec<PathBuf>);

impl SharedMounts {
    fn add(&mut self, dir: &Path) {
        for args in [
            vec!["--bind".to_owned(), s(dir), s(dir)],
            vec!["--make-shared".to_owned(), s(dir)],
        ] {
            let st = Command::new("mount").args(&args).status().expect("mount");
            assert!(st.success(), "mount {args:?}");
        }
        self.0.push(dir.to_owned());
    }
}

impl Drop for SharedMounts {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
    }
}

/// The pod of the rendered DaemonSet, turned into CRI configs the way kubelet would.
struct PodPlan {
    /// hostPath volume name -> directory on this machine
    volumes: HashMap<String, PathBuf>,
    seccomp: Option<String>,
    host_pid: bool,
}

impl PodPlan {
    /// Maps every hostPath of `ds` to a directory of the test: `<node>/host<path>`, except the
    /// cgroup tree: an empty cgroup2 directory of the node's own.
    fn new(node: &TestNode, ds: &Value, containerd_dir: &str, shared: &mut SharedMounts) -> Self {
        let spec = &ds["spec"]["template"]["spec"];
        let propagated: Vec<String> = spec["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
            .filter(|m| m["mountPropagation"].is_string())
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect();
        let mut volumes = HashMap::new();
        for v in spec["volumes"].as_array().expect("volumes") {
            let name = v["name"].as_str().expect("volume name").to_owned();
            if v["projected"].is_object() {
                // What kubelet projects (the service-account token, the CA, the namespace) has
                // no API server behind it here: files of the same names stand in.
                let dir = node.dir().join("projected").join(&name);
                std::fs::create_dir_all(&dir).expect("create projected dir");
                for file in ["token", "ca.crt", "namespace"] {
                    std::fs::write(dir.join(file), b"").expect("write projected file");
                }
                volumes.insert(name, dir);
                continue;
            }
            let path = v["hostPath"]["path"].as_str().expect("hostPath");
            let dir = if path == "/sys/fs/cgroup" {
                // A real but empty cgroup2 directory under the node's own cgroup parent (removed
                // with the node): the housekeeper refuses a cgroup root that is no cgroup
                // filesystem, and must not see this machine's cgroups.
                let v2 = Path::new("/sys/fs/cgroup/unified");
                let v2 = if v2.is_dir() {
                    v2
                } else {
                    Path::new("/sys/fs/cgroup")
                };
                v2.join(node.cgroup_parent().trim_start_matches('/'))
                    .join("housekeeper-view")
            } else {
                host_dir(node, path)
            };
            std::fs::create_dir_all(&dir).expect("create hostPath dir");
            if path == containerd_dir {
                // containerd's socket, hard-linked into a directory of its own: a socket inode
                // accepts connections through any of its links.
                std::fs::hard_link(node.containerd_socket(), dir.join("containerd.sock"))
                    .expect("link containerd.sock");
            }
            if propagated.contains(&name) {
                shared.add(&dir);
            }
            volumes.insert(name, dir);
        }
        Self {
            volumes,
            seccomp: spec["securityContext"]["seccompProfile"]["type"]
                .as_str()
                .map(str::to_owned),
            host_pid: spec["hostPID"] == true,
        }
    }

    fn namespaces(&self) -> NamespaceOption {
        NamespaceOption {
            network: NamespaceMode::Node as i32,
            pid: if self.host_pid {
                NamespaceMode::Node
            } else {
                NamespaceMode::Container
            } as i32,
            ipc: NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    fn sandbox(&self, node: &TestNode) -> PodSandboxConfig {
        let mut config = PodSpec::new("podward")
            .namespace("podward-system")
            .sandbox_config(node)
            .expect("sandbox config");
        if let Some(linux) = &mut config.linux
            && let Some(sc) = &mut linux.security_context
        {
            sc.namespace_options = Some(self.namespaces());
        }
        config
    }

    /// The CRI config of a rendered container.
    fn container(&self, c: &Value) -> ContainerConfig {
        let name = c["name"].as_str().expect("name");
        let mounts = c["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let host = &self.volumes[m["name"].as_str().expect("mount name")];
                let propagation = match m["mountPropagation"].as_str() {
                    Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
                    Some("Bidirectional") => MountPropagation::PropagationBidirectional,
                    _ => MountPropagation::PropagationPrivate,
                };
                Mount {
                    container_path: m["mountPath"].as_str().expect("mountPath").to_owned(),
                    host_path: s(host),
                    readonly: m["readOnly"] == true,
                    propagation: propagation as i32,
                    ..Default::default()
                }
            })
            .collect();
        let env = c["env"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let key = e["name"].as_str().expect("env name").to_owned();
                let value = match e["value"].as_str() {
                    Some(v) => v.to_owned(),
                    None if e["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP" => {
                        HOST_IP.to_owned()
                    }
                    // No API server here: the prober's API side retries in the background.
                    None if e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName" => {
                        "chart-test-node".to_owned()
                    }
                    None if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" => {
                        "podward-system".to_owned()
                    }
                    None => panic!("{name}: env {key} has a source this test cannot supply"),
                };
                KeyValue { key, value }
            })
            .collect();
        let sc = &c["securityContext"];
        let security_context = LinuxContainerSecurityContext {
            privileged: sc["privileged"] == true,
            readonly_rootfs: sc["readOnlyRootFilesystem"] == true,
            no_new_privs: sc["allowPrivilegeEscalation"] == false,
            run_as_user: sc["runAsUser"].as_i64().map(|value| Int64Value { value }),
            capabilities: Some(Capability {
                drop_capabilities: strs(&sc["capabilities"]["drop"]),
                add_capabilities: strs(&sc["capabilities"]["add"]),
                ..Default::default()
            }),
            seccomp: self.seccomp.as_deref().map(|ty| SecurityProfile {
                profile_type: match ty {
                    "RuntimeDefault" => ProfileType::RuntimeDefault,
                    "Unconfined" => ProfileType::Unconfined,
                    other => panic!("seccomp {other} not supported by this test"),
                } as i32,
                ..Default::default()
            }),
            namespace_options: Some(self.namespaces()),
            ..Default::default()
        };
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.to_owned(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: c["image"].as_str().expect("image").to_owned(),
                ..Default::default()
            }),
            command: strs(&c["command"]),
            args: strs(&c["args"])
                .iter()
                .map(|a| {
                    a.replace("$(PODWARD_HOST_IP)", HOST_IP)
                        .replace("$(NODE_NAME)", "chart-test-node")
                })
                .collect(),
            envs: env,
            mounts,
            log_path: format!("{name}.log"),
            linux: Some(LinuxContainerConfig {
                security_context: Some(security_context),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// The log of a container (CRI writes it under the sandbox's log directory).
fn container_log(node: &TestNode, name: &str) -> String {
    let mut out = String::new();
    let logs = node.dir().join("logs");
    for entry in walk(&logs) {
        if entry
            .file_name()
            .is_some_and(|n| n == format!("{name}.log").as_str())
        {
            out.push_str(&std::fs::read_to_string(&entry).unwrap_or_default());
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_built_with_buildah_run_the_chart_on_containerd() {
    let node = TestNode::start().await.expect("test node");
    let registry = node
        .registry()
        .expect("the loopback registry (apt-get install docker-registry skopeo)")
        .to_owned();
    let bin_dir = podward_e2e::bin_path("podward-prober")
        .parent()
        .expect("bin dir")
        .to_owned();
    let tag = format!("e2e-{}", std::process::id());
    let prefix = format!("{registry}/podward");

    // Build and push, as the docs say, but from the debug binaries.
    let started = Instant::now();
    let out = Command::new(repo().join("deploy/build-images.sh"))
        .arg(format!("--registry={prefix}"))
        .arg(format!("--tag={tag}"))
        .arg(format!("--bin-dir={}", s(&bin_dir)))
        .arg(format!("--storage-root={}", s(&node.dir().join("buildah"))))
        .arg("--push")
        .arg("--tls-verify=false")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .expect("run deploy/build-images.sh");
    assert!(
        out.status.success(),
        "build-images.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "build-images.sh: 3 images built and pushed in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The chart, rendered against those images; free admin ports (the machine runs other tests).
    let (prober_port, hk_port, shim_port) = (free_port(), free_port(), free_port());
    let rendered = Render::defaults()
        .set(json!({
            "image": {"registry": prefix, "tag": tag},
            "prober": {"adminPort": prober_port},
            "housekeeper": {"adminPort": hk_port},
            "shimInstaller": {"enabled": true},
        }))
        .run();
    let ds = rendered.get("DaemonSet");
    let containerd_dir = "/run/containerd";
    let mut shared = SharedMounts::default();
    let plan = PodPlan::new(&node, ds, containerd_dir, &mut shared);

    let mut images = node.image_client().await;
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0];
    let prober = container(ds, "prober");
    let hk = container(ds, "housekeeper");
    for c in [init, prober, hk] {
        let image = c["image"].as_str().expect("image");
        assert!(image.starts_with(&format!("{prefix}/")), "{image}");
        images
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: image.to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("PullImage {image}: {e}"));
    }

    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let mut rt = driver.client();
    let sandbox_config = plan.sandbox(&node);
    let sandbox = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let start = |config: ContainerConfig| {
        let mut rt = rt.clone();
        let sandbox = sandbox.clone();
        let sandbox_config = sandbox_config.clone();
        async move {
            let name = config.metadata.as_ref().map(|m| m.name.clone());
            let id = rt
                .create_container(CreateContainerRequest {
                    pod_sandbox_id: sandbox,
                    config: Some(config),
                    sandbox_config: Some(sandbox_config),
                })
                .await
                .unwrap_or_else(|e| panic!("CreateContainer {name:?}: {e}"))
                .into_inner()
                .container_id;
            rt.start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("StartContainer {name:?}: {e}"));
            id
        }
    };

    // 1. The installer (an init container: it must run to completion, exit 0).
    let init_id = start(plan.container(init)).await;
    let mut exit = None;
    eventually(
        "the shim installer to exit",
        Duration::from_secs(60),
        async || {
            let status = rt
                .clone()
                .container_status(ContainerStatusRequest {
                    container_id: init_id.clone(),
                    verbose: false,
                })
                .await
                .ok()
                .and_then(|r| r.into_inner().status);
            if let Some(st) = status
                && st.finished_at > 0
            {
                exit = Some(st.exit_code);
            }
            exit.is_some()
        },
    )
    .await;
    assert_eq!(
        exit,
        Some(0),
        "installer log:\n{}",
        container_log(&node, "shim-installer")
    );
    let installed = host_dir(&node, "/usr/local/bin").join("podward-shim");
    let help = Command::new(&installed)
        .arg("--help")
        .output()
        .expect("run the installed shim");
    assert!(help.status.success(), "installed shim --help failed");
    for unit in ["podward-shim.socket", "podward-shim.service"] {
        assert_eq!(
            std::fs::read(host_dir(&node, "/etc/systemd/system").join(unit)).expect("unit"),
            std::fs::read(repo().join("deploy/systemd").join(unit)).expect("source unit"),
            "{unit} installed byte for byte"
        );
    }

    // 2. The two daemons, with the chart's args, mounts and security context.
    start(plan.container(prober)).await;
    start(plan.container(hk)).await;
    let sockets = host_dir(&node, "/run/podward");
    for (name, port, daemon) in [
        ("prober", prober_port, "prober"),
        ("housekeeper", hk_port, "housekeeper"),
    ] {
        let addr: SocketAddr = format!("{HOST_IP}:{port}").parse().expect("addr");
        let what = format!("{name} in its image to answer /healthz and /readyz");
        eventually(&what, Duration::from_secs(60), async || {
            matches!(get(addr, "/healthz").await, Some((200, _)))
                && match get(addr, "/readyz").await {
                    Some((200, _)) => true,
                    // No API server stands behind the chart's API settings here: the prober reads
                    // the node's pods but cannot renew its node lease, and says so.
                    Some((503, body)) => daemon == "prober" && body.contains("node lease"),
                    _ => false,
                }
        })
        .await;
        let (_, metrics) = get(addr, "/metrics").await.expect("metrics");
        let info = format!("podward_{daemon}_build_info{{");
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&info))
            .unwrap_or_else(|| panic!("{info} missing from {name}'s /metrics"));
        assert!(
            line.contains("profile=\"debug\"") && line.ends_with(" 1"),
            "{line}"
        );
        assert!(
            sockets.join(format!("{daemon}.sock")).exists(),
            "{name}'s socket in the shared hostPath /run/podward: {:?}",
            walk(&sockets)
        );
    }

    // 3. The shim from the installer image, on the same sockets: it forwards CRI to containerd,
    // and the prober (in its container) moves from polling containerd to following the shim.
    let mut shim = plan.container(init);
    shim.metadata = Some(ContainerMetadata {
        name: "shim".to_owned(),
        attempt: 0,
    });
    shim.command = vec!["/opt/podward/podward-shim".to_owned()];
    shim.args = vec![
        "--listen=/run/podward/cri.sock".to_owned(),
        "--control-socket=/run/podward/shim.sock".to_owned(),
        format!("--containerd-socket={containerd_dir}/containerd.sock"),
        format!("--admin-addr={HOST_IP}:{shim_port}"),
    ];
    shim.mounts = ["podward-sockets", "containerd-sockets"]
        .iter()
        .map(|v| {
            let host = &plan.volumes[*v];
            Mount {
                container_path: if *v == "podward-sockets" {
                    "/run/podward".to_owned()
                } else {
                    containerd_dir.to_owned()
                },
                host_path: s(host),
                ..Default::default()
            }
        })
        .collect();
    shim.log_path = "shim.log".to_owned();
    start(shim).await;
    let shim_admin: SocketAddr = format!("{HOST_IP}:{shim_port}").parse().expect("addr");
    eventually(
        "the shim from the installer image to answer /healthz",
        Duration::from_secs(60),
        async || matches!(get(shim_admin, "/healthz").await, Some((200, _))),
    )
    .await;
    let through_shim = Driver::connect(&sockets.join("cri.sock"))
        .await
        .expect("CRI through the containerised shim");
    let version = through_shim
        .client()
        .version(VersionRequest::default())
        .await
        .expect("Version through the shim")
        .into_inner();
    assert_eq!(version.runtime_name, "containerd");
    let prober_admin: SocketAddr = format!("{HOST_IP}:{prober_port}").parse().expect("addr");
    eventually(
        "the prober to follow the shim",
        Duration::from_secs(60),
        async || {
            get(prober_admin, "/metrics").await.is_some_and(|(_, m)| {
                m.lines()
                    .any(|l| l == "podward_prober_source_connected{source=\"shim\"} 1")
            })
        },
    )
    .await;
}
