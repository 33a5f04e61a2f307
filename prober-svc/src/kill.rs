//! Killing a container after a liveness or startup failure: CRI `StopContainer` sent straight to
//! containerd (not through the shim, which may be the thing that is down), with the grace period
//! kubelet would use. kubelet then restarts the container by its restart policy.

use futures::future::BoxFuture;
use podward_api::cri::StopContainerRequest;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::spec::ProbeSpec;

/// kubelet's `minimumGracePeriodInSeconds`: a kill never gets less than this.
pub const MIN_GRACE_SECONDS: i64 = 2;

/// The pod grace kubelet defaults to when the annotation is missing.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Grace period for a probe-triggered kill, as kubelet's `setTerminationGracePeriod`: the
/// probe-level `terminationGracePeriodSeconds`, else the pod's, never below 2 s.
pub fn grace_seconds(spec: &ProbeSpec, pod_grace: Option<i64>) -> i64 {
    spec.termination_grace_period_seconds
        .or(pod_grace)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(MIN_GRACE_SECONDS)
}

/// Stops containers.
pub trait Killer: Send + Sync + 'static {
    /// Stops `container_id`, giving it `grace_seconds` between SIGTERM and SIGKILL.
    fn stop_container(
        &self,
        container_id: String,
        grace_seconds: i64,
    ) -> BoxFuture<'_, Result<(), String>>;
}

/// The real one: CRI `StopContainer` on containerd.
pub struct CriKiller {
    client: RuntimeServiceClient<Channel>,
}

impl CriKiller {
    /// A killer over `channel` (a lazily connecting channel to containerd's socket).
    pub fn new(channel: Channel) -> Self {
        Self {
            client: RuntimeServiceClient::new(channel),
        }
    }
}

impl Killer for CriKiller {
    fn stop_container(
        &self,
        container_id: String,
        grace_seconds: i64,
    ) -> BoxFuture<'_, Result<(), String>> {
        let mut client = self.client.clone();
        Box::pin(async move {
            client
                .stop_container(StopContainerRequest {
                    container_id,
                    timeout: grace_seconds,
                })
                .await
                .map(|_| ())
                .map_err(|s| format!("StopContainer: {}: {}", s.code(), s.message()))
        })
    }
}
