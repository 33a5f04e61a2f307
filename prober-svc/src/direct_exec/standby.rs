//! Exec helpers started ahead of the probe that needs them.
//!
//! Starting a helper (fork, `execve` of the helper binary, the loader's relocations, the
//! runtime's start-up) costs more CPU than everything the helper then does for a probe, and none
//! of it depends on the container or the command. So the prober starts one helper once, in its
//! own namespaces, as a zygote ([`super::init`]'s `zygote`): it forks a helper for each probe,
//! which begins exactly where a freshly started helper begins. A probe creates the helper's
//! control socket and output pipes, sends them to the zygote, and hands the plan to the child;
//! the start-up is neither on the probe's path nor repeated per probe.
//!
//! Every helper runs from one sealed in-memory copy of the helper binary ([`sys::sealed_copy`],
//! made by the first direct probe), never from the file itself: what a process of the helper
//! shows as `/proc/<pid>/exe` can be read but never written, whatever file `--exec-helper` names
//! and whoever can write to it (runc's answer to CVE-2019-5736).
//!
//! The zygote is started by the first direct probe (a prober whose containers all use CRI never
//! starts one). It holds nothing of a container. When the prober exits, the zygote reads the
//! end of its socket and exits; when the runner is dropped it is killed (`kill_on_drop`). A
//! zygote that died is noticed by the next probe, which starts another. When the zygote cannot
//! be used (it cannot be started, or its socket is full or closed), and with the standby turned
//! off, each probe starts a helper of its own.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use nix::fcntl::OFlag;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair,
};
use parking_lot::Mutex;
use tokio::net::UnixStream;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use super::helper::{Helper, Pipe, Process};
use super::init::ZYGOTE_ARG;
use super::plan::HELPER_ARG;
use super::sys;
use crate::handler::exec::runner::ExecError;

/// Why the helper could not run the command: the probe errors (and is retried).
pub(crate) fn failed(message: impl Into<String>) -> ExecError {
    ExecError::Runtime {
        code: tonic::Code::Unknown,
        message: message.into(),
    }
}

/// A helper started for one probe from `exe`, the sealed copy of the binary at `path` (named
/// in its `argv[0]`).
fn start_helper(exe: &OwnedFd, path: &Path) -> Result<Helper, ExecError> {
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| failed(format!("socketpair: {e}")))?;
    let mut child = sealed_command(exe, path)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("start the exec helper {}: {e}", path.display())))?;
    Ok(Helper {
        stdout: child.stdout.take().map(|p| Box::new(p) as Pipe),
        stderr: child.stderr.take().map(|p| Box::new(p) as Pipe),
        process: Process::Started(child),
        control: control_socket(ours)?,
    })
}

/// The helper binary run from `exe` (its sealed copy), named `path` in its `argv[0]`, with no
/// environment, killed when dropped.
fn sealed_command(exe: &OwnedFd, path: &Path) -> Command {
    // The child resolves its own /proc/self/fd before its execve closes the (close-on-exec)
    // descriptor: `fexecve` without a path of the host.
    let mut command = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    command
        .arg0(path)
        .arg(HELPER_ARG)
        .env_clear()
        .kill_on_drop(true);
    command
}

/// The prober's end of a helper's control socket, registered with the runtime.
fn control_socket(ours: std::os::unix::net::UnixStream) -> Result<UnixStream, ExecError> {
    ours.set_nonblocking(true)
        .map_err(|e| failed(format!("control socket: {e}")))?;
    UnixStream::from_std(ours).map_err(|e| failed(format!("control socket: {e}")))
}

/// A pipe for one of the helper's outputs: the prober's read end, and the write end for the
/// helper (blocking, as the command expects its stdout and stderr to be).
fn output_pipe() -> Result<(Pipe, OwnedFd), ExecError> {
    let (read, write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| failed(format!("pipe: {e}")))?;
    let read = pipe::Receiver::from_owned_fd(read).map_err(|e| failed(format!("pipe: {e}")))?;
    Ok((Box::new(read), write))
}

/// The standby zygote: its process and the prober's end of its request socket.
struct Zygote {
    child: Child,
    requests: OwnedFd,
}

impl Zygote {
    /// Starts the zygote from `exe`, the sealed copy of `path`.
    fn start(exe: &OwnedFd, path: &Path) -> Result<Zygote, ExecError> {
        let (requests, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| failed(format!("socketpair: {e}")))?;
        let child = sealed_command(exe, path)
            .arg(ZYGOTE_ARG)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(format!("start the exec helper {}: {e}", path.display())))?;
        Ok(Zygote { child, requests })
    }

    /// Whether the zygote has not exited (logged when it has).
    fn alive(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                tracing::warn!(%status, "the standby exec helper exited; starting another");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "the standby exec helper cannot be waited for; starting another");
                false
            }
        }
    }

    /// Asks the zygote for one helper on these descriptors. Never blocks: a zygote that does
    /// not keep up (its socket full) is not waited for.
    fn fork_helper(
        &self,
        control: &OwnedFd,
        stdout: &OwnedFd,
        stderr: &OwnedFd,
    ) -> nix::Result<()> {
        let fds = [control.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()];
        sendmsg::<()>(
            self.requests.as_raw_fd(),
            &[IoSlice::new(b"f")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map(drop)
    }
}

/// The helper binary and the zygote that forks its helpers.
pub(crate) struct Standby {
    path: PathBuf,
    /// The sealed copy of `path`, made once (or why it could not be).
    exe: OnceLock<Result<OwnedFd, String>>,
    enabled: bool,
    zygote: Mutex<Option<Zygote>>,
}

impl Standby {
    /// Helpers run `path`; with `enabled` false every probe starts its own.
    pub(crate) fn new(path: PathBuf, enabled: bool) -> Self {
        Self {
            path,
            exe: OnceLock::new(),
            enabled,
            zygote: Mutex::new(None),
        }
    }

    /// The sealed copy, made first if this is the first helper (a blocking copy of the binary,
    /// once per runner).
    fn exe(&self) -> Result<&OwnedFd, ExecError> {
        let exe = self.exe.get_or_init(|| {
            sys::sealed_copy(&self.path).map_err(|e| {
                format!(
                    "copy the exec helper {} into a sealed memfd: {e}",
                    self.path.display()
                )
            })
        });
        exe.as_ref().map_err(|e| failed(e.clone()))
    }

    /// A helper for one probe: forked by the zygote (started first if there is none, or it
    /// died), else one started now.
    pub(crate) fn take(&self) -> Result<Helper, ExecError> {
        let exe = self.exe()?;
        if self.enabled {
            match self.forked(exe) {
                Ok(h) => return Ok(h),
                Err(e) => {
                    tracing::debug!(error = %e, "the standby exec helper could not fork a helper; starting one for this probe")
                }
            }
        }
        start_helper(exe, &self.path)
    }

    /// A helper forked by the zygote.
    fn forked(&self, exe: &OwnedFd) -> Result<Helper, ExecError> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| failed(format!("socketpair: {e}")))?;
        let (stdout, stdout_theirs) = output_pipe()?;
        let (stderr, stderr_theirs) = output_pipe()?;
        // A duplicate shares the open file, and so the non-blocking mode `control_socket` sets.
        let ours_again = ours
            .try_clone()
            .map_err(|e| failed(format!("control socket: {e}")))?;
        let theirs = OwnedFd::from(theirs);
        let mut slot = self.zygote.lock();
        if slot.as_mut().is_some_and(|z| !z.alive()) {
            *slot = None;
        }
        let zygote = match &mut *slot {
            Some(z) => z,
            none => none.insert(Zygote::start(exe, &self.path)?),
        };
        if let Err(e) = zygote.fork_helper(&theirs, &stdout_theirs, &stderr_theirs) {
            // Full: it is behind, and this probe does not wait for it. Anything else (it died,
            // its socket is closed): the next probe starts another.
            if e != nix::errno::Errno::EAGAIN {
                *slot = None;
            }
            return Err(failed(format!("hand the standby exec helper a probe: {e}")));
        }
        drop(slot);
        // The zygote has its own copies now; ours close here.
        drop((theirs, stdout_theirs, stderr_theirs));
        Ok(Helper {
            process: Process::forked(ours_again),
            control: control_socket(ours)?,
            stdout: Some(stdout),
            stderr: Some(stderr),
        })
    }
}
