//! [`ExecRunner`] over CRI `ExecSync`, sent to containerd.

use std::time::Duration;

use futures::future::BoxFuture;
use podward_api::cri::{ExecSyncRequest, runtime_service_client::RuntimeServiceClient};
use podward_api::limits::CRI_MESSAGE_BYTES;
use tonic::transport::Channel;

use super::runner::{ExecError, ExecOutput, ExecRunner};

/// kubelet's default `--runtime-request-timeout`, added to the probe timeout for the gRPC deadline.
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// [`ExecRunner`] over CRI `ExecSync` (to containerd).
#[derive(Debug, Clone)]
pub struct CriExec {
    client: RuntimeServiceClient<Channel>,
    runtime_request_timeout: Duration,
}

impl CriExec {
    /// A runner on `channel` (a connection to the CRI runtime socket).
    pub fn new(channel: Channel) -> Self {
        let client = RuntimeServiceClient::new(channel)
            .max_decoding_message_size(CRI_MESSAGE_BYTES)
            .max_encoding_message_size(CRI_MESSAGE_BYTES);
        Self {
            client,
            runtime_request_timeout: RUNTIME_REQUEST_TIMEOUT,
        }
    }

    async fn run(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecOutput, ExecError> {
        let joined = cmd.join(" ");
        let mut req = tonic::Request::new(ExecSyncRequest {
            container_id: container_id.to_owned(),
            cmd,
            // CRI takes whole seconds, as kubelet's `int64(timeout.Seconds())`.
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        });
        let deadline = self.runtime_request_timeout + timeout;
        req.set_timeout(deadline);
        let mut client = self.client.clone();
        let timed_out = || ExecError::Timeout {
            command: joined.clone(),
            timeout,
        };
        match tokio::time::timeout(deadline, client.exec_sync(req)).await {
            Err(_) => Err(timed_out()),
            Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => Err(timed_out()),
            Ok(Err(status)) => Err(ExecError::Runtime {
                code: status.code(),
                message: status.message().to_owned(),
            }),
            Ok(Ok(resp)) => {
                let resp = resp.into_inner();
                Ok(ExecOutput {
                    stdout: resp.stdout,
                    stderr: resp.stderr,
                    exit_code: resp.exit_code,
                })
            }
        }
    }
}

impl ExecRunner for CriExec {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        let container_id = container_id.to_owned();
        Box::pin(async move { self.run(&container_id, cmd, timeout).await })
    }
}
