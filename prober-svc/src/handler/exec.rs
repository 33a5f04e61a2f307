//! Exec probe (kubelet `pkg/probe/exec` + `RunInContainer`).
//!
//! The command is `$(VAR)`-expanded with the container's static env, run by an [`ExecRunner`]
//! (CRI `ExecSync`: [`cri::CriExec`], or directly in the container: [`crate::direct_exec::DirectExec`]), and its stdout then stderr (concatenated, not
//! interleaved) kept up to 10 KiB. Exit 0 is Success, any other exit Failure; a timeout is a
//! Failure whose output is the timeout text (the `ExecProbeTimeout` gate's default); any other
//! runner error is returned, and the prober retries it.

pub mod cri;
pub mod runner;

use std::time::Duration;

use self::runner::{ExecError, ExecOutput, ExecRunner};
use super::attempt::{Answer, ProbeTarget};
use super::expand::expand_command;
use crate::model::outcome::MAX_OUTPUT_BYTES;

/// One exec probe.
pub(crate) async fn probe(
    runner: &dyn ExecRunner,
    command: &[String],
    timeout: Duration,
    target: &ProbeTarget<'_>,
) -> Result<Answer, ExecError> {
    let cmd = expand_command(command, target.env);
    match runner.exec_sync(target.container_id, cmd, timeout).await {
        Ok(out) => {
            let data = capped_output(&out);
            Ok(if out.exit_code == 0 {
                Answer::Success(data)
            } else {
                Answer::Failure(data)
            })
        }
        Err(e @ ExecError::Timeout { .. }) => Ok(Answer::Failure(e.to_string())),
        Err(e) => Err(e),
    }
}

/// stdout then stderr, cut at [`MAX_OUTPUT_BYTES`] (kubelet's `LimitWriter`): only the capped part
/// is copied.
fn capped_output(out: &ExecOutput) -> String {
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
