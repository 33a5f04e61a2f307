//! One probe's exec helper, as the prober holds it: its control socket, the read ends of its
//! stdout and stderr, and the process itself — a child the prober started (then a
//! [`tokio::process::Child`]), or a child of the standby zygote (then its pidfd, which the
//! helper sends as its first word on the control socket).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::signal::Signal;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest};
use tokio::net::UnixStream;
use tokio::process::Child;

use super::sys;

/// The read end of one of the helper's output pipes.
pub(crate) type Pipe = Box<dyn AsyncRead + Send + Unpin>;

/// A helper for one probe, waiting for its plan.
pub(crate) struct Helper {
    pub(crate) process: Process,
    /// The prober's end of the control socket (the helper's stdin).
    pub(crate) control: UnixStream,
    pub(crate) stdout: Option<Pipe>,
    pub(crate) stderr: Option<Pipe>,
}

/// The helper's process.
pub(crate) enum Process {
    /// Started by the prober from the sealed copy (killed when dropped).
    Started(Child),
    /// Forked by the zygote: its pidfd once the helper has sent it (killed when dropped).
    Forked(Option<AsyncFd<OwnedFd>>),
}

impl Process {
    /// Whether the pidfd is still to be received on the control socket.
    pub(crate) fn awaits_pidfd(&self) -> bool {
        matches!(self, Process::Forked(None))
    }

    /// Takes the pidfd the forked helper sent.
    pub(crate) fn set_pidfd(&mut self, pidfd: OwnedFd) -> io::Result<()> {
        *self = Process::Forked(Some(sys::watch_exit(pidfd)?));
        Ok(())
    }

    /// Tells the helper the probe is over (`SIGTERM`), unless it has exited.
    pub(crate) fn end(&mut self) {
        match self {
            Process::Started(child) => {
                if let (Ok(None), Some(pid)) = (child.try_wait(), child.id()) {
                    // Our own unreaped child: the PID is still its own.
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        Signal::SIGTERM,
                    );
                }
            }
            Process::Forked(Some(pidfd)) => {
                // A pidfd names its process for good: an exited helper gets nothing (ESRCH).
                let _ = sys::pidfd_signal(pidfd.get_ref(), Some(Signal::SIGTERM));
            }
            Process::Forked(None) => {}
        }
    }

    /// Waits for the helper to exit: how it ended, as far as the prober can tell (only its
    /// parent learns a forked helper's status).
    pub(crate) async fn exited(&mut self) -> Option<String> {
        match self {
            Process::Started(child) => child.wait().await.ok().map(|s| s.to_string()),
            Process::Forked(Some(pidfd)) => {
                // A pidfd turns readable when its process has exited.
                pidfd.readable().await.ok().map(|_| "exited".to_owned())
            }
            Process::Forked(None) => None,
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A started helper is killed by `kill_on_drop`; a forked one like this.
        if let Process::Forked(Some(pidfd)) = self {
            let _ = sys::pidfd_signal(pidfd.get_ref(), Some(Signal::SIGKILL));
        }
    }
}

/// Receives the forked helper's pidfd: the first byte on the control socket, carrying one
/// descriptor. The end of the socket first means the helper never started (the zygote could
/// not fork, or died).
pub(crate) async fn receive_pidfd(control: &UnixStream) -> io::Result<OwnedFd> {
    control
        .async_io(Interest::READABLE, || {
            let mut byte = [0u8; 1];
            let mut iov = [IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!([RawFd; 1]);
            let msg = recvmsg::<()>(
                control.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
            )?;
            let mut fds = Vec::new();
            for cmsg in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    fds.extend(raw.into_iter().map(sys::adopt_received));
                }
            }
            let bytes = msg.bytes;
            let first = iov[0][0];
            match (bytes, fds.pop(), fds.is_empty()) {
                (0, None, _) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the helper ended before it started",
                )),
                (1, Some(pidfd), true) if first == b'p' => Ok(pidfd),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the helper's first word was not its pidfd",
                )),
            }
        })
        .await
}
