//! The prober's side of one direct exec: take a helper (`standby`), hand it the plan, collect
//! stdout and stderr (each kept up to the probe output limit, the rest read and dropped so the
//! command never blocks on a full pipe), and end the probe.
//!
//! The probe is over when the command has exited and both pipes are closed, or at the timeout.
//! Either way the reaper is then told to kill what is left of the command's process tree and
//! exits after reaping it, so nothing started by a probe outlives it and no zombie stays (the
//! answer does not wait for that: the helper's exit is awaited in the background).
//! containerd's `ExecSync` instead kills only the command at the timeout and waits for every
//! holder of its pipes to exit (a `sleep 10 &` keeps a 1 s probe open 10 s, and its orphans are
//! left to the container's init): the results are the same — the exit code when the command
//! exited in time, else the timeout — but they come at the timeout, not later.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use super::plan::{Plan, Report};
use super::standby::{Helper, Standby, failed};
use crate::handler::exec::runner::{ExecError, ExecOutput};
use crate::handler::output::MAX_OUTPUT_BYTES;

/// How long the end of a probe may take (the reaper killing and reaping the tree, the helper
/// exiting) before the prober stops waiting for it.
const REAP_GRACE: Duration = Duration::from_secs(5);

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

/// Runs `plan` through a helper from `standby`, giving up after `timeout`.
pub(crate) async fn run(
    standby: &Standby,
    plan: &Plan,
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let deadline = Instant::now() + timeout;
    let body = serde_json::to_vec(plan).map_err(|e| failed(format!("encode plan: {e}")))?;
    let Helper {
        mut child,
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
    // The helper is entering the container now: start the next probe's helper meanwhile.
    standby.refill();
    let mut lines = BufReader::new(control).lines();
    let out = tokio::spawn(async move {
        match stdout {
            Some(s) => capped_read(s).await,
            None => Vec::new(),
        }
    });
    let err = tokio::spawn(async move {
        match stderr {
            Some(s) => capped_read(s).await,
            None => Vec::new(),
        }
    });
    let outputs = async {
        let (o, e) = tokio::join!(out, err);
        (o.unwrap_or_default(), e.unwrap_or_default())
    };
    tokio::pin!(outputs);

    let mut reaper: Option<i32> = None;
    let mut exited: Option<i32> = None;
    let mut failure: Option<String> = None;
    let mut control_open = true;
    let mut output: Option<(Vec<u8>, Vec<u8>)> = None;
    let timed_out = loop {
        if failure.is_some() || (exited.is_some() && output.is_some()) {
            break false;
        }
        if !control_open && exited.is_none() {
            // The helper, the reaper and the command are gone without an exit report.
            break false;
        }
        tokio::select! {
            line = lines.next_line(), if control_open => match line {
                Ok(Some(l)) => match Report::parse(&l) {
                    Some(Report::Reaper(p)) => reaper = Some(p),
                    // The first report wins (the helper may add one after the reaper's).
                    Some(Report::Exited(c)) => {
                        exited.get_or_insert(c);
                    }
                    Some(Report::Failed(m)) => failure = Some(m),
                    None => failure = Some(format!("exec helper: unexpected report {l:?}")),
                },
                Ok(None) | Err(_) => control_open = false,
            },
            o = &mut outputs, if output.is_none() => output = Some(o),
            _ = tokio::time::sleep_until(deadline) => break true,
        }
    };
    // End the probe: the reaper kills what is left and exits once it has reaped it all. It
    // holds the control socket until then, so an open socket means its PID is still its own.
    match reaper {
        Some(p) if control_open => {
            let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
        }
        Some(_) => {}
        None => {
            let _ = child.start_kill();
        }
    }
    let helper_status = if exited.is_some() && failure.is_none() {
        // The answer is known: the helper's exit (after its reaper's) is waited for off the
        // probe's path. Dropped after the grace, it is killed and reaped by the runtime.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
        });
        None
    } else {
        let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
        child.try_wait().ok().flatten()
    };
    if let Some(m) = failure {
        return Err(failed(m));
    }
    let joined = || plan.argv.join(" ");
    let Some(code) = exited else {
        if timed_out {
            return Err(ExecError::Timeout {
                command: joined(),
                timeout,
            });
        }
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
            helper_status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "still running".into()),
            String::from_utf8_lossy(&stderr).trim()
        )));
    };
    // Exited in time: what the pipes held by now (the tree is dead, so they are closed).
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
