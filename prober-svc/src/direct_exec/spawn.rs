//! The prober's side of one direct exec: take a helper (`standby`), hand it the plan, collect
//! stdout and stderr (each kept up to the probe output limit, the rest read and dropped so the
//! command never blocks on a full pipe), and end the probe.
//!
//! The probe is over when the command has exited and both pipes are closed, or at the timeout.
//! Either way the helper is then told (`SIGTERM`) to end everything the probe started: its
//! reaper kills what is left of the command's process tree and exits once it has reaped it, and
//! the helper kills the tree itself when the reaper does not (the container can stop it or kill
//! it), and the command through its pidfd whatever became of the reaper. The answer does not
//! wait for that: the helper's exit is awaited in the background; the pipes' readers end with
//! the probe, so a process of the container that kept a pipe holds nothing of the prober. The
//! helper exits only once every process of its probe is gone, and counts against its
//! container's in-flight bound ([`InFlight`]) until then.
//!
//! containerd's `ExecSync` instead kills only the command at the timeout and waits for every
//! holder of its pipes to exit (a `sleep 10 &` keeps a 1 s probe open 10 s, and its orphans are
//! left to the container's init): the results are the same — the exit code when the command
//! exited in time, else the timeout — but they come at the timeout, not later.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::helper::{Helper, Process, receive_pidfd};
use super::plan::{Plan, Report};
use super::standby::{Standby, failed};
use crate::handler::exec::runner::{ExecError, ExecOutput};
use crate::model::outcome::MAX_OUTPUT_BYTES;

/// How long the end of a probe usually takes at most (the reaper killing and reaping the tree,
/// the helper exiting); a helper that takes longer is waited for all the same, and logged.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// A place among the helpers in flight in one container, held until the helper has exited.
pub(crate) type InFlight = OwnedSemaphorePermit;

/// Why a direct exec gave no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The probe errors (or times out) with this.
    Exec(ExecError),
    /// The helper refused to enter the container: what the plan was made for changed.
    Refused(String),
}

impl From<ExecError> for Failure {
    fn from(e: ExecError) -> Self {
        Failure::Exec(e)
    }
}

/// Reads `r` to its end, keeping the first [`MAX_OUTPUT_BYTES`].
async fn capped_read(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// A pipe's reader, aborted (its descriptor closed) when dropped.
struct Reader(JoinHandle<Vec<u8>>);

impl Reader {
    fn start(pipe: Option<impl AsyncRead + Unpin + Send + 'static>) -> Reader {
        Reader(tokio::spawn(async move {
            match pipe {
                Some(p) => capped_read(p).await,
                None => Vec::new(),
            }
        }))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for the helper to exit, then frees its place in flight: the helper exits only once
/// every process of its probe is gone, so the place is taken as long as one of them lives (a
/// process of a frozen cgroup dies only when thawed: said once, after [`REAP_GRACE`]).
async fn settle(mut process: Process, place: InFlight) -> Option<String> {
    let status = match tokio::time::timeout(REAP_GRACE, process.exited()).await {
        Ok(status) => status,
        Err(_) => {
            tracing::warn!(
                grace = ?REAP_GRACE,
                "a direct exec helper has not finished after its probe (a process of the probe \
                 cannot die yet: a frozen cgroup?); its place in flight stays taken until it does"
            );
            process.exited().await
        }
    };
    drop(process);
    drop(place);
    status
}

/// Runs `plan` through a helper from `standby`, giving up after `timeout`; `place` is this
/// helper's place among its container's helpers in flight.
///
/// One piece on purpose: the loop's state (the exit report, a problem, the outputs, whether the
/// control socket is open) decides each of the four ways out below it; split into steps, every
/// step would take and return all of it.
pub(crate) async fn run(
    standby: &Standby,
    plan: &Plan,
    timeout: Duration,
    place: InFlight,
) -> Result<ExecOutput, Failure> {
    let deadline = Instant::now() + timeout;
    let body = serde_json::to_vec(plan).map_err(|e| failed(format!("encode plan: {e}")))?;
    let Helper {
        mut process,
        mut control,
        stdout,
        stderr,
    } = standby.take()?;
    control
        .write_all(&body)
        .await
        .map_err(|e| failed(format!("send plan: {e}")))?;
    control
        .shutdown()
        .await
        .map_err(|e| failed(format!("send plan: {e}")))?;
    if process.awaits_pidfd() {
        match tokio::time::timeout_at(deadline, receive_pidfd(&control)).await {
            Ok(Ok(pidfd)) => process
                .set_pidfd(pidfd)
                .map_err(|e| failed(format!("exec helper pidfd: {e}")))?,
            Ok(Err(e)) => return Err(failed(format!("the standby exec helper's fork: {e}")).into()),
            Err(_) => {
                // Told once its pidfd comes, and waited for (bounded) off the probe's path.
                process.end();
                tokio::spawn(settle(process, place));
                return Err(ExecError::Timeout {
                    command: plan.argv.join(" "),
                    timeout,
                }
                .into());
            }
        }
    }
    let mut lines = BufReader::new(control).lines();
    let (mut out, mut err) = (Reader::start(stdout), Reader::start(stderr));
    let outputs = async {
        let (o, e) = tokio::join!(&mut out.0, &mut err.0);
        (o.unwrap_or_default(), e.unwrap_or_default())
    };
    tokio::pin!(outputs);

    let mut exited: Option<i32> = None;
    let mut problem: Option<Failure> = None;
    let mut control_open = true;
    let mut output: Option<(Vec<u8>, Vec<u8>)> = None;
    let timed_out = loop {
        if problem.is_some() || (exited.is_some() && output.is_some()) {
            break false;
        }
        if !control_open && exited.is_none() {
            // The helper, the reaper and the command are gone without an exit report.
            break false;
        }
        tokio::select! {
            line = lines.next_line(), if control_open => match line {
                Ok(Some(l)) => match Report::parse(&l) {
                    // The first report wins (the helper may add one after the reaper's).
                    Some(Report::Exited(c)) => {
                        exited.get_or_insert(c);
                    }
                    Some(Report::Failed(m)) => problem = Some(failed(m).into()),
                    Some(Report::Refused(m)) => problem = Some(Failure::Refused(m)),
                    None => {
                        problem = Some(failed(format!("exec helper: unexpected report {l:?}")).into())
                    }
                },
                Ok(None) | Err(_) => control_open = false,
            },
            o = &mut outputs, if output.is_none() => output = Some(o),
            _ = tokio::time::sleep_until(deadline) => break true,
        }
    };
    process.end();
    if let Some(p) = problem {
        settle(process, place).await;
        return Err(p);
    }
    let Some(code) = exited else {
        if timed_out {
            tokio::spawn(settle(process, place));
            return Err(ExecError::Timeout {
                command: plan.argv.join(" "),
                timeout,
            }
            .into());
        }
        let status = settle(process, place).await;
        let stderr = match output {
            Some((_, e)) => e,
            None => {
                tokio::time::timeout(REAP_GRACE, &mut outputs)
                    .await
                    .unwrap_or_default()
                    .1
            }
        };
        return Err(failed(format!(
            "the exec helper ended ({}) without starting the command: {}",
            status.unwrap_or_else(|| "still running".into()),
            String::from_utf8_lossy(&stderr).trim()
        ))
        .into());
    };
    // The answer is known: the helper's exit (after its reaper's) is waited for off the probe's
    // path.
    tokio::spawn(settle(process, place));
    // Exited in time: what the pipes hold once the tree is dead (a process of the container
    // that kept them open is not waited for past the grace).
    let (stdout, stderr) = match output {
        Some(o) => o,
        None => tokio::time::timeout(REAP_GRACE, &mut outputs)
            .await
            .unwrap_or_default(),
    };
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code: code,
    })
}
