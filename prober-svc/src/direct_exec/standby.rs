//! Exec helpers started ahead of the probe that needs them.
//!
//! Starting a helper (fork, `execve` of the prober's own binary, the loader's relocations, the
//! runtime's start-up) is most of a direct exec's latency, and none of it depends on the
//! container or the command: a helper waits for its plan on the control socket before it does
//! anything. So the prober keeps one helper started in its own namespaces; a probe takes it,
//! hands it the plan and starts the next one while the taken helper enters the container. The CPU
//! per probe is the same; the start-up is off the probe's path.
//!
//! Every helper runs from one sealed in-memory copy of the helper binary ([`sys::sealed_copy`],
//! made by the first direct probe), never from the file itself: what a process of the helper
//! shows as `/proc/<pid>/exe` can be read but never written, whatever file `--exec-helper` names
//! and whoever can write to it (runc's answer to CVE-2019-5736).
//!
//! The standby is started by the first direct probe (a prober whose containers all use CRI never
//! starts one). It holds nothing of a container. When the prober exits, the standby reads an
//! empty plan (its control socket closed) and exits without a word; when the runner is dropped it
//! is killed (`kill_on_drop`). A standby that died meanwhile is noticed when taken and replaced by
//! a helper started on the spot.

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

/// The helper binary and at most one helper started ahead.
pub(crate) struct Standby {
    path: PathBuf,
    /// The sealed copy of `path`, made once (or why it could not be).
    exe: OnceLock<Result<OwnedFd, String>>,
    enabled: bool,
    slot: Mutex<Option<Helper>>,
}

impl Standby {
    /// Helpers run `path`; with `enabled` false every probe starts its own.
    pub(crate) fn new(path: PathBuf, enabled: bool) -> Self {
        Self {
            path,
            exe: OnceLock::new(),
            enabled,
            slot: Mutex::new(None),
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

    /// The standby helper if it is still alive, else one started now. (A standby killed at this
    /// very moment is not noticed: that attempt errors with the helper's death and the prober
    /// makes the next of its three attempts at once, as for a runtime error through CRI.)
    pub(crate) fn take(&self) -> Result<Helper, ExecError> {
        let ready = self.slot.lock().take();
        if let Some(mut h) = ready {
            if matches!(h.child.try_wait(), Ok(None)) {
                return Ok(h);
            }
            tracing::debug!("the standby exec helper had exited; starting one for this probe");
        }
        self.start()
    }

    /// Starts the next standby helper unless one is waiting. A failure here is only logged:
    /// the next probe starts its own helper and reports the error.
    pub(crate) fn refill(&self) {
        if !self.enabled || self.slot.lock().is_some() {
            return;
        }
        match self.start() {
            Ok(h) => {
                // A concurrent refill may have won: keep one, drop (kill) the other.
                let mut slot = self.slot.lock();
                if slot.is_none() {
                    *slot = Some(h);
                }
            }
            Err(e) => tracing::debug!(error = %e, "starting the standby exec helper"),
        }
    }
}
