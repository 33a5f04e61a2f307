//! [`Pod`]: a running pod and what the driver observed of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{
    ExecSyncRequest, ExecSyncResponse, PodSandboxConfig, PodSandboxStatusRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, StopContainerRequest, StopPodSandboxRequest,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use super::spec::PodSpec;
use super::state::PodState;
use super::sync::{SyncLoop, sandbox_containers};
use crate::error::HarnessError;
use crate::node::TestNode;

/// A pod run by the [`crate::Driver`]. Dropping it stops its sync loop (the node's teardown
/// removes the sandbox); [`Pod::delete`] removes it the way kubelet does.
#[derive(Debug)]
pub struct Pod {
    client: RuntimeServiceClient<Channel>,
    spec: PodSpec,
    sandbox_id: String,
    state: Arc<PodState>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Pod {
    /// Wraps a pod whose sandbox and containers were started and spawns its sync loop.
    pub(crate) fn start(
        client: RuntimeServiceClient<Channel>,
        spec: PodSpec,
        sandbox_id: String,
        sandbox_config: PodSandboxConfig,
        state: Arc<PodState>,
        node: &TestNode,
    ) -> Pod {
        let (stop, stop_rx) = watch::channel(false);
        let sync = SyncLoop {
            client: client.clone(),
            spec: spec.clone(),
            sandbox_id: sandbox_id.clone(),
            sandbox_config,
            state: state.clone(),
            backoff: spec
                .kubelet_backoff
                .map(super::backoff::KubeletBackoff::new),
        };
        let task = tokio::spawn(sync.run(stop_rx));
        node.register_pod_task(task.abort_handle());
        Pod {
            client,
            spec,
            sandbox_id,
            state,
            stop,
            task: Some(task),
        }
    }

    /// The pod's UID.
    pub fn uid(&self) -> &str {
        &self.spec.uid
    }

    /// The pod's spec.
    pub fn spec(&self) -> &PodSpec {
        &self.spec
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        &self.sandbox_id
    }

    /// The pod's IP from `PodSandboxStatus` (`None` for a host-network pod, which has none in
    /// CRI: use 127.0.0.1 there, as the prober does with `--node-ip`).
    pub async fn ip(&self) -> Result<Option<String>, HarnessError> {
        let mut client = self.client.clone();
        let status = client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: self.sandbox_id.clone(),
                verbose: false,
            })
            .await
            .map_err(HarnessError::grpc("PodSandboxStatus"))?
            .into_inner()
            .status;
        Ok(status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty()))
    }

    /// The current restartCount of `container` (0 if unknown).
    pub fn restart_count(&self, container: &str) -> u32 {
        self.state.get(container).map_or(0, |t| t.attempt)
    }

    /// Every restartCount observed for `container`, in order (consecutive repeats folded).
    pub fn restart_counts_seen(&self, container: &str) -> Vec<u32> {
        self.state
            .get(container)
            .map(|t| t.seen)
            .unwrap_or_default()
    }

    /// Whether `container` exited and its restart policy keeps it down.
    pub fn finished(&self, container: &str) -> bool {
        self.state.get(container).is_some_and(|t| t.finished)
    }

    /// Waits until `container`'s restartCount is at least `n`.
    pub async fn wait_restart_count(
        &self,
        container: &str,
        n: u32,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        while self.restart_count(container) < n {
            if Instant::now() > deadline {
                return Err(HarnessError::Timeout {
                    what: format!(
                        "restartCount of {container} to reach {n} (seen {:?})",
                        self.restart_counts_seen(container)
                    ),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The id of `container`'s current instance.
    pub fn container_id(&self, container: &str) -> Option<String> {
        self.state.get(container).and_then(|t| t.id)
    }

    /// CRI `ExecSync` in `container`'s current instance.
    pub async fn exec_sync(
        &self,
        container: &str,
        cmd: &[&str],
        timeout: Duration,
    ) -> Result<ExecSyncResponse, HarnessError> {
        let id = self.container_id(container).ok_or_else(|| {
            HarnessError::Invalid(format!(
                "no container {container:?} in pod {}",
                self.spec.name
            ))
        })?;
        let secs = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX).max(1);
        let mut req = tonic::Request::new(ExecSyncRequest {
            container_id: id,
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            timeout: secs,
        });
        req.set_timeout(timeout + Duration::from_secs(5));
        let mut client = self.client.clone();
        Ok(client
            .exec_sync(req)
            .await
            .map_err(HarnessError::grpc("ExecSync"))?
            .into_inner())
    }

    /// Deletes the pod as kubelet does: stops the sync loop, StopContainer (with the grace
    /// period) for each container, StopPodSandbox, RemoveContainer, RemovePodSandbox. As for
    /// kubelet, NotFound counts as done (a test or the housekeeper may have removed parts).
    pub async fn delete(mut self) -> Result<(), HarnessError> {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let mut client = self.client.clone();
        let containers = sandbox_containers(&mut client, &self.sandbox_id).await?;
        for c in &containers {
            let req = StopContainerRequest {
                container_id: c.id.clone(),
                timeout: self.spec.termination_grace_period_seconds,
            };
            retry_transient("StopContainer", || {
                let mut client = client.clone();
                let req = req.clone();
                async move { client.stop_container(req).await.map(drop) }
            })
            .await?;
        }
        let req = StopPodSandboxRequest {
            pod_sandbox_id: self.sandbox_id.clone(),
        };
        retry_transient("StopPodSandbox", || {
            let mut client = client.clone();
            let req = req.clone();
            async move { client.stop_pod_sandbox(req).await.map(drop) }
        })
        .await?;
        for c in &containers {
            client
                .remove_container(RemoveContainerRequest {
                    container_id: c.id.clone(),
                })
                .await
                .map(drop)
                .or_else(not_found_is_done("RemoveContainer"))?;
        }
        client
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: self.sandbox_id.clone(),
            })
            .await
            .map(drop)
            .or_else(not_found_is_done("RemovePodSandbox"))?;
        Ok(())
    }
}

/// Runs a stop call as kubelet would across sync loops: NotFound is done, and a transient
/// containerd error is retried a few times. containerd 1.6 answers `Unknown: ttrpc: closed` when
/// the container's task exits while the stop is being delivered (seen under load); kubelet simply
/// tries again on its next sync.
async fn retry_transient<F, Fut>(call: &'static str, mut attempt: F) -> Result<(), HarnessError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let mut delay = std::time::Duration::from_millis(50);
    for _ in 0..5 {
        match attempt().await {
            Ok(()) => return Ok(()),
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
            Err(s) if matches!(s.code(), tonic::Code::Unknown | tonic::Code::Unavailable) => {
                tracing::info!(call, status = %s.message(), "transient runtime error; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(status) => return Err(HarnessError::Grpc { call, status }),
        }
    }
    attempt().await.or_else(not_found_is_done(call))
}

/// Maps a NotFound status to success (the object is already gone), anything else to an error.
fn not_found_is_done(call: &'static str) -> impl FnOnce(tonic::Status) -> Result<(), HarnessError> {
    move |status| {
        if status.code() == tonic::Code::NotFound {
            Ok(())
        } else {
            Err(HarnessError::Grpc { call, status })
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
