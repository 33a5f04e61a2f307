//! [`Driver`]: a small kubelet that runs pods over CRI, against containerd or the shim.

mod backoff;
mod create;
mod cri_config;
mod pod;
mod pod_cgroup;
mod spec;
mod state;
mod sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{RunPodSandboxRequest, VersionRequest};
use tonic::transport::Channel;

use self::create::create_and_start;
use crate::error::HarnessError;
use crate::node::TestNode;

pub use pod::Pod;
pub use pod_cgroup::{QosClass, kubelet_cgroup_parent};
pub use spec::{ContainerPort, ContainerSpec, PodSpec, RestartPolicy, SecurityContext};

/// How long [`Driver::connect`] waits for the endpoint to answer `Version`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A kubelet-like CRI client: runs pods with kubelet's labels and annotations and restarts
/// exited containers by the pod's restart policy (one sync task per pod, like PLEG relisting
/// every 100 ms).
#[derive(Debug, Clone)]
pub struct Driver {
    endpoint: PathBuf,
    client: RuntimeServiceClient<Channel>,
}

impl Driver {
    /// Connects to a CRI endpoint (containerd's socket, or the shim's) and waits until it
    /// answers `Version`. The channel reconnects by itself when the endpoint restarts.
    pub async fn connect(endpoint: &Path) -> Result<Driver, HarnessError> {
        let client = RuntimeServiceClient::new(podward_api::socket::channel(endpoint))
            .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES);
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut probe = client.clone();
        loop {
            match probe.version(VersionRequest::default()).await {
                Ok(_) => break,
                Err(status) if Instant::now() > deadline => {
                    return Err(HarnessError::Grpc {
                        call: "Version",
                        status,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        Ok(Driver {
            endpoint: endpoint.to_owned(),
            client,
        })
    }

    /// The CRI endpoint this driver talks to.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// A runtime client on the driver's endpoint.
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    /// Runs `spec` on `node`: RunPodSandbox, then CreateContainer + StartContainer for each
    /// container (attempt 0), then starts the pod's sync loop. On error the sandbox is left to
    /// the node's teardown.
    pub async fn run_pod(&self, node: &TestNode, spec: PodSpec) -> Result<Pod, HarnessError> {
        let config = spec.sandbox_config(node)?;
        let mut client = self.client.clone();
        let sandbox_id = client
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(HarnessError::grpc("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id;
        let state = Arc::new(state::PodState::default());
        for c in &spec.containers {
            let id = create_and_start(&mut client, &sandbox_id, &config, &spec, c, 0).await?;
            state.started(&c.name, id, 0);
        }
        Ok(Pod::start(client, spec, sandbox_id, config, state, node))
    }
}
