//! The per-pod sync loop: relist containers (like kubelet's PLEG) and restart exited ones by
//! the pod's restart policy. Errors from the runtime are logged and retried on the next tick;
//! the loop ends when told to stop or when the sandbox is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{
    Container, ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest,
    PodSandboxConfig, PodSandboxStatusRequest, RemoveContainerRequest, StartContainerRequest,
};
use podward_api::labels;
use tokio::sync::watch;
use tonic::transport::Channel;

use super::backoff::KubeletBackoff;
use super::spec::{ContainerSpec, PodSpec};
use super::state::PodState;
use crate::error::HarnessError;

/// Relist period (kubelet's PLEG relists every second; tests want faster reactions).
const PERIOD: Duration = Duration::from_millis(100);

/// Everything the loop needs, owned by its task.
pub(crate) struct SyncLoop {
    pub(crate) client: RuntimeServiceClient<Channel>,
    pub(crate) spec: PodSpec,
    pub(crate) sandbox_id: String,
    pub(crate) sandbox_config: PodSandboxConfig,
    pub(crate) state: Arc<PodState>,
    /// kubelet's crash-loop back-off, when the pod asks for it.
    pub(crate) backoff: Option<KubeletBackoff>,
}

/// What one tick decided for one container.
enum Next {
    /// Running, created or finished for good: nothing to do.
    Nothing,
    /// Start the created-but-not-started instance again.
    Start(String),
    /// Create restart `attempt`.
    Restart(u32),
}

impl SyncLoop {
    /// Runs until `stop` turns true (or its sender is dropped) or the sandbox disappears.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        // Consecutive failed ticks: while the endpoint is down (a test restarting the shim or
        // containerd) only the first and every 50th failure is logged, not ten lines a second.
        let mut failures: u32 = 0;
        loop {
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                () = tokio::time::sleep(PERIOD) => {}
            }
            match self.tick().await {
                Ok(true) => failures = 0,
                Ok(false) => {
                    tracing::info!(pod = %self.spec.name, "sandbox gone; sync loop ends");
                    return;
                }
                Err(e) => {
                    if failures.is_multiple_of(50) {
                        tracing::warn!(pod = %self.spec.name, error = %e, failures, "sync (will retry)");
                    }
                    failures = failures.saturating_add(1);
                }
            }
        }
    }

    /// One relist; `Ok(false)` when the sandbox no longer exists.
    async fn tick(&mut self) -> Result<bool, HarnessError> {
        let listed = sandbox_containers(&mut self.client, &self.sandbox_id).await?;
        let by_id: HashMap<&str, &Container> = listed.iter().map(|c| (c.id.as_str(), c)).collect();
        let containers = self.spec.containers.clone();
        for c in &containers {
            let next = self.decide(c, &by_id).await?;
            match next {
                Next::Nothing => {}
                Next::Start(id) => {
                    self.client
                        .start_container(StartContainerRequest { container_id: id })
                        .await
                        .map_err(HarnessError::grpc("StartContainer"))?;
                }
                Next::Restart(attempt) => {
                    if !self.sandbox_exists().await? {
                        return Ok(false);
                    }
                    self.restart(c, attempt, &listed).await?;
                }
            }
        }
        Ok(true)
    }

    /// Looks at `c`'s current instance and decides what to do.
    async fn decide(
        &mut self,
        c: &ContainerSpec,
        by_id: &HashMap<&str, &Container>,
    ) -> Result<Next, HarnessError> {
        let tracked = self.state.with(&c.name, |t| t.clone());
        if tracked.finished {
            return Ok(Next::Nothing);
        }
        let current = tracked.id.as_deref().and_then(|id| by_id.get(id).copied());
        let Some(current) = current else {
            // The instance vanished (removed behind our back) or was never created: kubelet
            // would create it again, unless the policy says the pod is done.
            return Ok(match self.spec.restart_policy {
                super::spec::RestartPolicy::Never if tracked.id.is_some() => {
                    self.state.with(&c.name, |t| t.finished = true);
                    Next::Nothing
                }
                _ => Next::Restart(tracked.attempt + u32::from(tracked.id.is_some())),
            });
        };
        if let Some(n) = current
            .annotations
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse::<u32>().ok())
        {
            self.state.with(&c.name, |t| t.observe(n));
        }
        if current.state == ContainerState::ContainerCreated as i32 {
            return Ok(Next::Start(current.id.clone()));
        }
        if current.state != ContainerState::ContainerExited as i32 {
            return Ok(Next::Nothing);
        }
        let status = self
            .client
            .container_status(ContainerStatusRequest {
                container_id: current.id.clone(),
                verbose: false,
            })
            .await
            .map_err(HarnessError::grpc("ContainerStatus"))?
            .into_inner()
            .status
            .ok_or_else(|| HarnessError::Invalid("ContainerStatus without status".into()))?;
        if !self.spec.restart_policy.restarts(status.exit_code) {
            tracing::info!(pod = %self.spec.name, container = %c.name, exit_code = status.exit_code,
                policy = self.spec.restart_policy.as_str(), "container exited; not restarting");
            self.state.with(&c.name, |t| t.finished = true);
            return Ok(Next::Nothing);
        }
        let since_exit = podward_api::time::now_ns().saturating_sub(status.finished_at);
        if Duration::from_nanos(u64::try_from(since_exit).unwrap_or(0)) < self.spec.restart_backoff
        {
            return Ok(Next::Nothing);
        }
        if let Some(b) = &mut self.backoff {
            // kubelet's `getStableKey`: the container hash stands for the spec it ran.
            let key = format!(
                "{}_{}_{}_{}_{:x}",
                self.spec.name,
                self.spec.namespace,
                self.spec.uid,
                c.name,
                spec_hash(c)
            );
            let now = podward_api::time::now_ns();
            if b.in_backoff_since(&key, status.finished_at, now) {
                return Ok(Next::Nothing);
            }
            b.next(&key, status.finished_at, now);
        }
        Ok(Next::Restart(tracked.attempt + 1))
    }

    /// Creates and starts restart `attempt` of `c`, then removes dead instances older than the
    /// one it replaces (kubelet keeps one dead instance per container for its logs).
    async fn restart(
        &mut self,
        c: &ContainerSpec,
        attempt: u32,
        listed: &[Container],
    ) -> Result<(), HarnessError> {
        let previous = self.state.with(&c.name, |t| t.id.clone());
        let id = super::create::create_and_start(
            &mut self.client,
            &self.sandbox_id,
            &self.sandbox_config,
            &self.spec,
            c,
            attempt,
        )
        .await?;
        tracing::info!(pod = %self.spec.name, container = %c.name, attempt, "restarted container");
        self.state.started(&c.name, id, attempt);
        let stale = listed.iter().filter(|x| {
            x.metadata.as_ref().is_some_and(|m| m.name == c.name)
                && Some(&x.id) != previous.as_ref()
                && x.state == ContainerState::ContainerExited as i32
        });
        for old in stale {
            if let Err(e) = self
                .client
                .remove_container(RemoveContainerRequest {
                    container_id: old.id.clone(),
                })
                .await
            {
                tracing::debug!(container = %old.id, error = %e, "removing dead instance");
            }
        }
        Ok(())
    }

    /// Whether the sandbox still exists (NotFound => false; other errors propagate).
    async fn sandbox_exists(&mut self) -> Result<bool, HarnessError> {
        match self
            .client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: self.sandbox_id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(_) => Ok(true),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(HarnessError::Grpc {
                call: "PodSandboxStatus",
                status,
            }),
        }
    }
}

/// A stable hash of what a container runs (kubelet hashes the container spec).
fn spec_hash(c: &ContainerSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&c.name, &c.image, &c.command).hash(&mut h);
    h.finish()
}

/// Every container of sandbox `sandbox_id` (CRI `ListContainers` with a sandbox filter).
pub(crate) async fn sandbox_containers(
    client: &mut RuntimeServiceClient<Channel>,
    sandbox_id: &str,
) -> Result<Vec<Container>, HarnessError> {
    Ok(client
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: sandbox_id.to_owned(),
                ..Default::default()
            }),
        })
        .await
        .map_err(HarnessError::grpc("ListContainers"))?
        .into_inner()
        .containers)
}
