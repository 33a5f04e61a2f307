//! [`TestNode`]: a real containerd in a fresh temporary root.

mod cni;
mod config;
mod registry;
mod snapshotter;
mod sweep;
mod teardown;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use podward_api::cri::image_service_client::ImageServiceClient;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::cleanup::Footprint;
use crate::error::HarnessError;
use crate::images::ImageSet;
use crate::images::{BUSYBOX_IMAGE, PAUSE_IMAGE};

use config::NodePaths;
use registry::Registry;

/// How long containerd may take to answer CRI `Version` after start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A real containerd (with runc) in a fresh temporary root: its own socket, state, image store
/// and cgroup parent, so tests run side by side. [`BUSYBOX_IMAGE`] and [`PAUSE_IMAGE`] are
/// imported. Dropping it (also on panic) removes every sandbox, kills containerd and its shims,
/// unmounts, removes the cgroups and the directory.
#[derive(Debug)]
pub struct TestNode {
    paths: NodePaths,
    cgroup_parent: String,
    snapshotter: &'static str,
    images: ImageSet,
    containerd: Option<Child>,
    registry: Option<Registry>,
    /// The pod network (bridge + subnet), when the CNI plugins are installed.
    network: Option<cni::PodNetwork>,
    /// Restart loops of pods run on this node; aborted before teardown.
    pod_tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl TestNode {
    /// Builds (or reuses) the images, starts containerd in a new temp dir, waits until CRI
    /// answers and imports the images. Also starts a loopback registry when `docker-registry`
    /// and `skopeo` are installed (see [`TestNode::registry`]).
    pub async fn start() -> Result<TestNode, HarnessError> {
        crate::logging::init_test_logging();
        let started = Instant::now();
        let images = tokio::task::spawn_blocking(ImageSet::ensure)
            .await
            .map_err(|e| HarnessError::Invalid(format!("image build task: {e}")))??;
        let tmp = std::env::temp_dir();
        tokio::task::spawn_blocking({
            let tmp = tmp.clone();
            move || sweep::sweep_stale(&tmp)
        })
        .await
        .map_err(|e| HarnessError::Invalid(format!("sweep task: {e}")))?;
        let dir = tempfile::Builder::new()
            .prefix(sweep::DIR_PREFIX)
            .tempdir_in(&tmp)
            .map_err(HarnessError::io("create temp dir in", &tmp))?
            .keep();
        let id = dir
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .trim_start_matches(sweep::DIR_PREFIX)
                    .to_owned()
            })
            .unwrap_or_default();
        sweep::claim(&dir);
        let paths = NodePaths { dir };
        // From here on, Drop cleans up whatever the following steps leave on failure.
        let mut node = TestNode {
            cgroup_parent: format!("/podward-e2e-{id}"),
            snapshotter: "overlayfs",
            images,
            containerd: None,
            registry: None,
            network: None,
            pod_tasks: Arc::default(),
            paths,
        };
        node.snapshotter = snapshotter::detect(&node.paths.dir.join("overlay-check"));
        for d in [
            node.paths.cni().join("bin"),
            node.paths.cni().join("net.d"),
            node.paths.certs_d(),
        ] {
            std::fs::create_dir_all(&d).map_err(HarnessError::io("create", &d))?;
        }
        let mut cni_bin = node.paths.cni().join("bin");
        if cni::available() {
            let net = cni::configure(
                &id,
                &node.paths.cni().join("net.d"),
                &node.paths.cni().join("ipam"),
            )?;
            node.network = Some(net);
            cni_bin = PathBuf::from(cni::CNI_BIN_DIR);
        } else {
            tracing::warn!(
                "CNI plugins not installed (apt-get install containernetworking-plugins): \
                 only host-network pods can run"
            );
        }
        let conf = config::containerd_toml(&node.paths, node.snapshotter, &cni_bin);
        std::fs::write(node.paths.config(), conf)
            .map_err(HarnessError::io("write", node.paths.config()))?;
        // The registry (start + push, about a second) comes up while containerd starts and
        // imports: containerd reads hosts.toml at pull time, not at start.
        let registry = start_registry(
            node.paths.dir.join("registry"),
            node.images.busybox.clone(),
            node.paths.certs_d(),
        );
        let runtime = async {
            node.start_containerd().await?;
            node.import_images().await
        };
        let (registry, runtime) = tokio::join!(registry, runtime);
        runtime?;
        node.registry = registry?;
        tracing::info!(dir = %node.paths.dir.display(), snapshotter = node.snapshotter,
            registry = ?node.registry(), elapsed_ms = started.elapsed().as_millis() as u64,
            "test node ready");
        Ok(node)
    }

    /// containerd's gRPC socket (CRI and containerd's own API).
    pub fn containerd_socket(&self) -> PathBuf {
        self.paths.socket()
    }

    /// The test's private temp dir: put daemon sockets, pod dirs and logs here.
    pub fn dir(&self) -> &Path {
        &self.paths.dir
    }

    /// The cgroupfs parent of this node's pods (`/podward-e2e-<id>`), unique per node.
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    /// The snapshotter in use: `overlayfs`, or `native` where overlay mounts fail.
    pub fn snapshotter(&self) -> &str {
        self.snapshotter
    }

    /// The pods' subnet (e.g. `10.123.45.0/24`) when pod networking is available
    /// (`containernetworking-plugins` installed); host-network pods work without it.
    pub fn pod_subnet(&self) -> Option<&str> {
        self.network.as_ref().map(|n| n.subnet.as_str())
    }

    /// The image tarballs this node imported.
    pub fn images(&self) -> &ImageSet {
        &self.images
    }

    /// What this node leaves on the machine (for leak checks after it is dropped).
    pub fn footprint(&self) -> Footprint {
        Footprint {
            dir: self.paths.dir.clone(),
            cgroup_parent: self.cgroup_parent.clone(),
            bridge: self.network.as_ref().map(|n| n.bridge.clone()),
        }
    }

    /// A CRI runtime client straight to containerd (reconnects by itself after a restart).
    pub async fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(podward_api::socket::channel(self.paths.socket()))
            .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES)
    }

    /// A CRI image client straight to containerd.
    pub async fn image_client(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(podward_api::socket::channel(self.paths.socket()))
            .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES)
    }

    /// `host:port` of the loopback registry that holds `busybox:latest`, when `docker-registry`
    /// and `skopeo` are installed. Pull `format!("{host}/busybox:latest")`.
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_ref().map(Registry::host)
    }

    /// Kills containerd (SIGKILL). Containers keep running under their shims.
    pub async fn stop_containerd(&mut self) {
        if let Some(mut child) = self.containerd.take() {
            let _ = child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
    }

    /// Starts containerd again with the same root, state and socket; waits until CRI answers.
    /// A no-op when it is running.
    pub async fn start_containerd(&mut self) -> Result<(), HarnessError> {
        if let Some(child) = &mut self.containerd
            && matches!(child.try_wait(), Ok(None))
        {
            return Ok(());
        }
        let log_path = self.paths.log();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(HarnessError::io("open", &log_path))?;
        let err = log
            .try_clone()
            .map_err(HarnessError::io("dup", &log_path))?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.paths.config())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            // Its own group, so a Ctrl-C of the test run does not race our teardown.
            .process_group(0)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .spawn()
            .map_err(HarnessError::io("spawn", "containerd"))?;
        self.containerd = Some(child);
        self.wait_ready().await
    }

    /// Polls CRI `Version` until it answers, containerd dies, or [`READY_TIMEOUT`] passes.
    async fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = &mut self.containerd
                && let Ok(Some(status)) = child.try_wait()
            {
                let log = std::fs::read_to_string(self.paths.log()).unwrap_or_default();
                return Err(HarnessError::Invalid(format!(
                    "containerd exited with {status}: {}",
                    crate::binaries::tail(&log, 3000)
                )));
            }
            if let Ok(ch) = podward_api::socket::connect(self.paths.socket()).await {
                let mut rt = RuntimeServiceClient::new(ch);
                if rt
                    .version(podward_api::cri::VersionRequest::default())
                    .await
                    .is_ok()
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Timeout {
                    what: format!("containerd CRI on {}", self.paths.socket().display()),
                    after: READY_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `ctr images import` both tarballs, then waits until CRI sees them.
    async fn import_images(&self) -> Result<(), HarnessError> {
        let import = |tar: PathBuf, image: &'static str| {
            let sock = self.paths.socket();
            let snap = self.snapshotter;
            tokio::task::spawn_blocking(move || {
                let base = image.rsplit_once(':').map_or(image, |(b, _)| b);
                let mut cmd = Command::new("ctr");
                cmd.arg("--address")
                    .arg(&sock)
                    .args(["-n", podward_api::labels::CONTAINERD_K8S_NAMESPACE])
                    .args([
                        "images",
                        "import",
                        "--base-name",
                        base,
                        "--snapshotter",
                        snap,
                    ])
                    .arg(&tar);
                crate::binaries::run_checked(&mut cmd)
            })
        };
        let (a, b) = tokio::join!(
            import(self.images.busybox.clone(), BUSYBOX_IMAGE),
            import(self.images.pause.clone(), PAUSE_IMAGE)
        );
        for r in [a, b] {
            r.map_err(|e| HarnessError::Invalid(format!("import task: {e}")))??;
        }
        let mut images = self.image_client().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        for image in [BUSYBOX_IMAGE, PAUSE_IMAGE] {
            loop {
                let req = podward_api::cri::ImageStatusRequest {
                    image: Some(podward_api::cri::ImageSpec {
                        image: image.into(),
                        ..Default::default()
                    }),
                    verbose: false,
                };
                let found = images
                    .image_status(req)
                    .await
                    .map_err(HarnessError::grpc("ImageStatus"))?
                    .into_inner()
                    .image
                    .is_some();
                if found {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(HarnessError::Timeout {
                        what: format!("CRI to see imported image {image}"),
                        after: Duration::from_secs(10),
                    });
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        Ok(())
    }

    /// Registers a pod's restart loop, so teardown can stop it before removing sandboxes.
    pub(crate) fn register_pod_task(&self, handle: tokio::task::AbortHandle) {
        let mut tasks = self.pod_tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|h| !h.is_finished());
        tasks.push(handle);
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        for h in self
            .pod_tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            h.abort();
        }
        let containerd_alive = self
            .containerd
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if containerd_alive {
            teardown::remove_all_sandboxes(&self.paths.socket());
        }
        if let Some(mut child) = self.containerd.take() {
            teardown::stop_child(&mut child, Duration::from_secs(5));
        }
        self.registry = None;
        self.footprint().remove();
    }
}

/// Starts the loopback registry (if installed) and writes containerd's `hosts.toml` for it.
async fn start_registry(
    dir: PathBuf,
    busybox: PathBuf,
    certs_d: PathBuf,
) -> Result<Option<Registry>, HarnessError> {
    let Some(reg) = Registry::start(&dir, &busybox).await? else {
        return Ok(None);
    };
    let host_dir = certs_d.join(reg.host());
    std::fs::create_dir_all(&host_dir).map_err(HarnessError::io("create", &host_dir))?;
    let file = host_dir.join("hosts.toml");
    std::fs::write(&file, config::hosts_toml(reg.host()))
        .map_err(HarnessError::io("write", &file))?;
    Ok(Some(reg))
}
