//! Telling the prober to drop the workers of pods that are gone (kubelet's
//! `probeManager.CleanupPods`, which runs inside `HandlePodCleanups`). Best effort: the prober
//! may be down, and a failure here changes nothing on the node, so it is logged at debug.

use std::path::Path;
use std::time::Duration;

use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::prober::v1::{CleanupPodsRequest, StatusRequest};
use tonic::transport::Channel;

use crate::sources::Sources;

/// How long each prober call may take.
pub const PROBER_TIMEOUT: Duration = Duration::from_secs(2);

/// A client for the prober's socket (reconnects by itself).
#[derive(Clone, Debug)]
pub struct ProberLink {
    client: ProberClient<Channel>,
}

impl ProberLink {
    /// A lazy client for `socket`.
    pub fn new(socket: &Path) -> Self {
        Self {
            client: ProberClient::new(podward_api::socket::channel(socket)),
        }
    }

    /// Asks the prober which pods it probes, lists the runtime afterwards (so a pod the prober
    /// learned of before the list is in it if it still exists), and sends the ones that are gone.
    /// Returns the UIDs sent (empty when nothing was gone or the prober is unreachable).
    pub async fn cleanup_gone<S: Sources>(&self, sources: &S) -> Vec<String> {
        let mut c = self.client.clone();
        let status = match tokio::time::timeout(PROBER_TIMEOUT, c.status(StatusRequest::default()))
            .await
        {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "prober status unavailable; not cleaning up its pods");
                return Vec::new();
            }
            Err(_) => {
                tracing::debug!("prober status timed out; not cleaning up its pods");
                return Vec::new();
            }
        };
        if status.pods.is_empty() {
            return Vec::new();
        }
        let present = match sources.runtime().await {
            Ok(v) => v.uids(),
            Err(e) => {
                tracing::debug!(error = %e, "runtime unavailable; not cleaning up prober pods");
                return Vec::new();
            }
        };
        let mut gone: Vec<String> = status
            .pods
            .into_iter()
            .map(|p| p.pod_uid)
            .filter(|u| !u.is_empty() && !present.contains(u))
            .collect();
        gone.sort();
        gone.dedup();
        if gone.is_empty() {
            return gone;
        }
        let req = CleanupPodsRequest {
            gone_pod_uids: gone.clone(),
        };
        match tokio::time::timeout(PROBER_TIMEOUT, c.cleanup_pods(req)).await {
            Ok(Ok(r)) => {
                tracing::debug!(removed = ?r.into_inner().removed_pod_uids, "prober dropped pods that are gone");
                gone
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "prober CleanupPods failed");
                Vec::new()
            }
            Err(_) => {
                tracing::debug!("prober CleanupPods timed out");
                Vec::new()
            }
        }
    }
}
