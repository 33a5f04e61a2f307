//! One probe's exec helper, as the prober holds it: its control socket, the read ends of its
//! stdout and stderr, and the process itself — a child the prober started (then a
//! [`tokio::process::Child`]), or a child of the standby zygote (then its pidfd, which the
//! helper sends as its first word on the control socket).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::signal::Signal;
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
    /// Forked by the zygote (killed when dropped, even before its pidfd came).
    Forked(Forked),
}

/// A helper forked by the zygote, as far as the prober knows it.
pub(crate) struct Forked {
    /// A duplicate of the prober's end of the control socket, kept until the pidfd has come on
    /// it: a probe dropped before that still ends the helper once it runs.
    control: Option<std::os::unix::net::UnixStream>,
    pidfd: Option<AsyncFd<OwnedFd>>,
    /// The probe is over: the helper is told (`SIGTERM`) as soon as its pidfd comes.
    ended: bool,
}

impl Process {
    /// A helper the zygote is forking; `control` duplicates the prober's end of its control
    /// socket.
    pub(crate) fn forked(control: std::os::unix::net::UnixStream) -> Process {
        Process::Forked(Forked {
            control: Some(control),
            pidfd: None,
            ended: false,
        })
    }

    /// Whether the pidfd is still to be received on the control socket.
    pub(crate) fn awaits_pidfd(&self) -> bool {
        matches!(self, Process::Forked(Forked { pidfd: None, .. }))
    }

    /// Takes the pidfd the forked helper sent (and tells it the probe is over if it is).
    pub(crate) fn set_pidfd(&mut self, pidfd: OwnedFd) -> io::Result<()> {
        if let Process::Forked(f) = self {
            f.pidfd = Some(sys::watch_exit(pidfd)?);
            f.control = None;
            if f.ended {
                self.end();
            }
        }
        Ok(())
    }

    /// Tells the helper the probe is over (`SIGTERM`), unless it has exited; a forked helper
    /// whose pidfd has not come yet is told when it comes.
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
            Process::Forked(f) => {
                f.ended = true;
                if let Some(pidfd) = &f.pidfd {
                    // A pidfd names its process for good: an exited helper gets nothing.
                    let _ = sys::pidfd_signal(pidfd.get_ref(), Some(Signal::SIGTERM));
                }
            }
        }
    }

    /// Waits for the helper to exit (for a forked one, first for its pidfd): how it ended, as
    /// far as the prober can tell (only its parent learns a forked helper's status).
    pub(crate) async fn exited(&mut self) -> Option<String> {
        self.pidfd_came().await?;
        match self {
            Process::Started(child) => child.wait().await.ok().map(|s| s.to_string()),
            // A pidfd turns readable when its process has exited.
            Process::Forked(Forked {
                pidfd: Some(pidfd), ..
            }) => pidfd.readable().await.ok().map(|_| "exited".to_owned()),
            Process::Forked(_) => None,
        }
    }
}

impl Process {
    /// Waits for a forked helper's pidfd, if it has not come yet (and tells the helper the
    /// probe is over if it is); `None` when it never comes (the zygote could not fork, or died).
    async fn pidfd_came(&mut self) -> Option<()> {
        if let Process::Forked(f) = self
            && f.pidfd.is_none()
        {
            let control = UnixStream::from_std(f.control.take()?).ok()?;
            let pidfd = receive_pidfd(&control).await.ok()?;
            self.set_pidfd(pidfd).ok()?;
        }
        Some(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A started helper is killed by `kill_on_drop`; a forked one like this, or once its
        // pidfd comes (bounded: it comes at once, or never when the zygote died first).
        let Process::Forked(f) = self else { return };
        if let Some(pidfd) = &f.pidfd {
            let _ = sys::pidfd_signal(pidfd.get_ref(), Some(Signal::SIGKILL));
        } else if let (Some(control), Ok(runtime)) =
            (f.control.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                // As at a probe's end: told first (when its pidfd comes), so that it ends the
                // command's tree, then killed (this copy dropped) if it has not exited within
                // the grace.
                let mut rest = Process::forked(control);
                rest.end();
                if let Ok(Some(())) =
                    tokio::time::timeout(KILL_UNSTARTED_WITHIN, rest.pidfd_came()).await
                {
                    let _ = tokio::time::timeout(KILL_UNSTARTED_WITHIN, rest.exited()).await;
                }
            });
        }
    }
}

/// How long a dropped forked helper's pidfd is waited for, and then its exit once told.
const KILL_UNSTARTED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Receives the forked helper's pidfd: the first byte on the control socket, carrying one
/// descriptor. The end of the socket first means the helper never started (the zygote could
/// not fork, or died).
pub(crate) async fn receive_pidfd(control: &UnixStream) -> io::Result<OwnedFd> {
    control
        .async_io(Interest::READABLE, || {
            let mut got = sys::receive_fds(control.as_raw_fd())?;
            match (got.bytes, got.fds.pop(), got.fds.is_empty()) {
                (0, None, _) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the helper ended before it started",
                )),
                (1, Some(pidfd), true) if got.first == b'p' => Ok(pidfd),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the helper's first word was not its pidfd",
                )),
            }
        })
        .await
}

#[cfg(test)]
mod tests;
