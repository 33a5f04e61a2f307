//! The shim's Lifecycle index, read with one `Snapshot` call per pass. It is the only place that
//! knows which RunPodSandbox results never reached kubelet (undelivered), so it is how leaked
//! sandboxes are found. It is optional: without the shim every other rule still works.

use std::path::Path;
use std::time::Duration;

use podward_api::limits::API_MESSAGE_BYTES;
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::shim::v1::{Snapshot, SnapshotRequest};
use tonic::transport::Channel;

/// Errors from the shim.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The shim answered with an error (or is down: UNAVAILABLE).
    #[error("shim Snapshot: {0}")]
    Rpc(#[source] tonic::Status),
    /// The shim did not answer in time.
    #[error("shim Snapshot: no answer within {0:?}")]
    Timeout(Duration),
}

/// A Lifecycle client that reconnects by itself when the shim comes back.
#[derive(Clone, Debug)]
pub struct ShimClient {
    client: LifecycleClient<Channel>,
    timeout: Duration,
}

impl ShimClient {
    /// A lazy client for the shim's control socket.
    pub fn new(socket: &Path, timeout: Duration) -> Self {
        let client = LifecycleClient::new(podward_api::socket::channel(socket))
            .max_decoding_message_size(API_MESSAGE_BYTES);
        Self { client, timeout }
    }

    /// The shim's whole index as it is now.
    pub async fn snapshot(&self) -> Result<Snapshot, ShimError> {
        let mut c = self.client.clone();
        match tokio::time::timeout(self.timeout, c.snapshot(SnapshotRequest {})).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(ShimError::Rpc(s)),
            Err(_) => Err(ShimError::Timeout(self.timeout)),
        }
    }
}
