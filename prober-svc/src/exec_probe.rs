//! Exec probe (kubelet `pkg/probe/exec` + `RunInContainer`) and its CRI runner.
//!
//! The command is `$(VAR)`-expanded with the container's static env, run through CRI `ExecSync`,
//! and its stdout then stderr (concatenated, not interleaved) kept up to 10 KiB. Exit 0 is
//! Success, any other exit Failure; a timeout is a Failure whose output is the timeout text (the
//! `ExecProbeTimeout` gate's default); any other error is an error, retried by the prober.

use std::time::Duration;

use futures::future::BoxFuture;
use podward_api::cri::{ExecSyncRequest, runtime_service_client::RuntimeServiceClient};
use podward_api::limits::CRI_MESSAGE_BYTES;
use tonic::transport::Channel;

use crate::probe::expand::expand_command;
use crate::probe::{
    Attempt, ExecError, ExecOutput, ExecRunner, MAX_OUTPUT_BYTES, Outcome, ProbeTarget, go_duration,
};

/// kubelet's default `--runtime-request-timeout`, added to the probe timeout for the gRPC deadline.
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// One exec probe.
pub(crate) async fn probe(
    runner: &dyn ExecRunner,
    command: &[String],
    timeout: Duration,
    target: &ProbeTarget<'_>,
) -> Attempt {
    let cmd = expand_command(command, target.env);
    match runner.exec_sync(target.container_id, cmd, timeout).await {
        Ok(out) => {
            let data = capped_output(&out);
            Ok(if out.exit_code == 0 {
                Outcome::Success(data)
            } else {
                Outcome::Failure(data)
            })
        }
        Err(ExecError::Timeout(text)) => Ok(Outcome::Failure(text)),
        Err(ExecError::Other(text)) => Err(text),
    }
}

/// stdout then stderr, cut at [`MAX_OUTPUT_BYTES`] (kubelet's `LimitWriter`): only the capped part
/// is copied.
pub(crate) fn capped_output(out: &ExecOutput) -> String {
    let mut data = Vec::with_capacity((out.stdout.len() + out.stderr.len()).min(MAX_OUTPUT_BYTES));
    for part in [&out.stdout, &out.stderr] {
        let room = MAX_OUTPUT_BYTES - data.len();
        data.extend_from_slice(&part[..part.len().min(room)]);
    }
    match String::from_utf8(data) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

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
        let timed_out = || {
            ExecError::Timeout(format!(
                "command timed out: {joined:?} timed out after {}",
                go_duration(timeout)
            ))
        };
        match tokio::time::timeout(deadline, client.exec_sync(req)).await {
            Err(_) => Err(timed_out()),
            Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => Err(timed_out()),
            Ok(Err(status)) => Err(ExecError::Other(crate::grpc_probe::go_status(&status))),
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
