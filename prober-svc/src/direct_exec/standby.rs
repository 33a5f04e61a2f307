//! Exec helpers started ahead of the probe that needs them.
//!
//! Starting a helper (fork, `execve` of the prober's own binary, the loader's relocations, the
//! runtime's start-up) is most of a direct exec's latency, and none of it depends on the
//! container or the command: a helper waits for its plan on the control socket before it does
//! anything. So the prober keeps [`POOL`] helpers started in its own namespaces; a probe takes
//! the oldest, hands it the plan and starts the next one while the taken helper enters the
//! container. The CPU per probe is the same; the start-up is off the probe's path. Two, not one:
//! a probe that comes right after another (a node's probes of one period, or a retry) would
//! otherwise take the helper the probe before it started a moment ago, still in its start-up.
//!
//! Every helper runs from one sealed in-memory copy of the helper binary ([`sys::sealed_copy`],
//! made by the first direct probe), never from the file itself: what a process of the helper
//! shows as `/proc/<pid>/exe` can be read but never written, whatever file `--exec-helper` names
//! and whoever can write to it (runc's answer to CVE-2019-5736).
//!
//! A standby waits at a lower priority than the prober's ([`WAITING_NICE`] added to its nice
//! value), so that its start-up, which runs while the probe that started it goes on, yields
//! the CPU to the helper, the reaper and the command of the probes in flight; the probe that
//! takes it sets it back to the prober's own priority before it sends the plan, so the reaper
//! and the command inherit exactly what they would without a standby (a standby whose priority
//! cannot be set back is dropped, never used).
//!
//! The standbys are started by the first direct probe (a prober whose containers all use CRI
//! never starts one). They hold nothing of a container. When the prober exits, the standby reads an
//! empty plan (its control socket closed) and exits without a word; when the runner is dropped it
//! is killed (`kill_on_drop`). A standby that died meanwhile is noticed when taken and replaced by
//! a helper started on the spot.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use parking_lot::Mutex;
use tokio::net::UnixStream;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

use super::plan::HELPER_ARG;
use super::sys;
use crate::handler::exec::runner::ExecError;

/// One started helper, waiting for its plan.
pub(crate) struct Helper {
    pub(crate) child: Child,
    /// The prober's end of the control socket (the helper's stdin).
    pub(crate) control: UnixStream,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

/// Why the helper could not run the command: the probe errors (and is retried).
pub(crate) fn failed(message: impl Into<String>) -> ExecError {
    ExecError::Runtime {
        code: tonic::Code::Unknown,
        message: message.into(),
    }
}

impl Helper {
    /// Starts the helper from `exe`, the sealed copy of the binary at `path` (named in its
    /// `argv[0]`).
    fn start(exe: &OwnedFd, path: &Path) -> Result<Helper, ExecError> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| failed(format!("socketpair: {e}")))?;
        ours.set_nonblocking(true)
            .map_err(|e| failed(format!("socketpair: {e}")))?;
        // The child resolves its own /proc/self/fd before its execve closes the (close-on-exec)
        // descriptor: `fexecve` without a path of the host.
        let mut child = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()))
            .arg0(path)
            .arg(HELPER_ARG)
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(format!("start the exec helper {}: {e}", path.display())))?;
        let control =
            UnixStream::from_std(ours).map_err(|e| failed(format!("control socket: {e}")))?;
        Ok(Helper {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            control,
        })
    }
}

/// Helpers kept started ahead of the probes that take them.
pub(crate) const POOL: usize = 2;

/// Added to the prober's nice value while a standby starts and waits.
const WAITING_NICE: i32 = 5;

/// The helper binary and at most [`POOL`] helpers started ahead, the oldest first.
pub(crate) struct Standby {
    path: PathBuf,
    /// The sealed copy of `path`, made once (or why it could not be).
    exe: OnceLock<Result<OwnedFd, String>>,
    enabled: bool,
    pool: Mutex<VecDeque<Helper>>,
}

impl Standby {
    /// Helpers run `path`; with `enabled` false every probe starts its own.
    pub(crate) fn new(path: PathBuf, enabled: bool) -> Self {
        Self {
            path,
            exe: OnceLock::new(),
            enabled,
            pool: Mutex::new(VecDeque::with_capacity(POOL)),
        }
    }

    /// Starts a helper from the sealed copy, making it first if this is the first helper (a
    /// blocking copy of the binary, once per runner).
    fn start(&self) -> Result<Helper, ExecError> {
        let exe = self.exe.get_or_init(|| {
            sys::sealed_copy(&self.path).map_err(|e| {
                format!(
                    "copy the exec helper {} into a sealed memfd: {e}",
                    self.path.display()
                )
            })
        });
        match exe {
            Ok(fd) => Helper::start(fd, &self.path),
            Err(e) => Err(failed(e.clone())),
        }
    }

    /// The oldest standby helper still alive, else one started now (standbys that died meanwhile
    /// are dropped). (A standby killed at this very moment is not noticed: that attempt errors
    /// with the helper's death and the prober makes the next of its three attempts at once, as
    /// for a runtime error through CRI.)
    pub(crate) fn take(&self) -> Result<Helper, ExecError> {
        loop {
            let ready = self.pool.lock().pop_front();
            let Some(mut h) = ready else { break };
            if !matches!(h.child.try_wait(), Ok(None)) {
                tracing::debug!("a standby exec helper had exited; trying the next");
                continue;
            }
            match restore_priority(&h.child) {
                Ok(()) => return Ok(h),
                Err(e) => {
                    tracing::debug!(error = %e, "a standby exec helper's priority could not be set back; dropping it");
                }
            }
        }
        self.start()
    }

    /// Starts standby helpers until [`POOL`] wait. A failure here is only logged: the next
    /// probe starts its own helper and reports the error.
    pub(crate) fn refill(&self) {
        if !self.enabled {
            return;
        }
        while self.pool.lock().len() < POOL {
            match self.start() {
                Ok(h) => {
                    lower_priority(&h.child);
                    // A concurrent refill may have filled the pool meanwhile: keep at most
                    // `POOL`, drop (kill) the rest.
                    let mut pool = self.pool.lock();
                    if pool.len() < POOL {
                        pool.push_back(h);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "starting a standby exec helper");
                    return;
                }
            }
        }
    }
}

/// Lowers a just started standby's priority by [`WAITING_NICE`] (failures leave it at the
/// prober's: it then only competes with the probes in flight, as before).
fn lower_priority(child: &Child) {
    let (Some(pid), Ok(own)) = (child.id(), sys::nice_of(0)) else {
        return;
    };
    let _ = sys::set_nice(pid as libc::pid_t, (own + WAITING_NICE).min(19));
}

/// Sets a standby back to the prober's own priority (this thread's nice value; the prober's
/// threads share it), so that what it starts inherits that.
fn restore_priority(child: &Child) -> std::io::Result<()> {
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the standby has exited"))?;
    let own = sys::nice_of(0)?;
    // Our own unreaped child: the PID is still its own.
    sys::set_nice(pid as libc::pid_t, own)
}
