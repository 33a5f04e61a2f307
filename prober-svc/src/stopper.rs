//! The seam between the kill path (`crate::consequences::kill`) and the runtime: a [`Stopper`]
//! stops one container. The real one sends CRI `StopContainer` straight to containerd (not through
//! the shim, which may be the thing that is down); tests and the benchmark count stops instead.

use futures::future::BoxFuture;
use podward_api::cri::StopContainerRequest;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

/// Why a container could not be stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopError {
    /// The runtime failed the `StopContainer` call.
    #[error("StopContainer: {code}: {message}")]
    Rpc {
        /// The gRPC status code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

/// Stops containers.
pub trait Stopper: Send + Sync + 'static {
    /// Stops `container_id`, giving it `grace_seconds` between SIGTERM and SIGKILL.
    fn stop_container(
        &self,
        container_id: String,
        grace_seconds: i64,
    ) -> BoxFuture<'_, Result<(), StopError>>;
}

/// The real one: CRI `StopContainer` on containerd.
pub struct CriStopper {
    client: RuntimeServiceClient<Channel>,
}

impl CriStopper {
    /// A stopper over `channel` (a lazily connecting channel to containerd's socket).
    pub fn new(channel: Channel) -> Self {
        Self {
            client: RuntimeServiceClient::new(channel),
        }
    }
}

impl Stopper for CriStopper {
    fn stop_container(
        &self,
        container_id: String,
        grace_seconds: i64,
    ) -> BoxFuture<'_, Result<(), StopError>> {
        let mut client = self.client.clone();
        Box::pin(async move {
            client
                .stop_container(StopContainerRequest {
                    container_id,
                    timeout: grace_seconds,
                })
                .await
                .map(|_| ())
                .map_err(|s| StopError::Rpc {
                    code: s.code(),
                    message: s.message().to_owned(),
                })
        })
    }
}
