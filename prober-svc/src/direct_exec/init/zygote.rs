//! The standby helper: one process, started once from the sealed copy, that forks a helper
//! for every probe (a zygote, as Android and Chromium call a process that forks ready-made
//! children).
//!
//! Starting a helper from its binary (`execve`, the loader, the C library's and Rust's
//! start-up) costs far more CPU than the helper's whole work for a probe, and on a busy node
//! that start-up competes for the CPU with the probe it was started for. A fork of a small,
//! single-threaded process that has done nothing yet costs a fraction of it. The child starts
//! exactly where a freshly started helper starts: its stdin, stdout and stderr are the probe's
//! (the control socket and the two pipes, sent here by the prober), every other descriptor is
//! closed, its signal actions are the ones it was started with, and it runs the same code
//! (the helper's `run`), with what a helper learns at its start before any plan (the identities of
//! its own namespaces, its signal actions) learnt once by the zygote and inherited.
//!
//! What the children share with each other is what any fork shares: the zygote's memory as it
//! was (copy-on-write, never `CLONE_VM`) and so its address-space layout. The zygote holds
//! nothing of any container or probe: it never reads a plan. It is non-dumpable from its first
//! instruction, as every helper, and so are the children until their command's `execve`.
//!
//! The protocol, on the zygote's stdin (a `SOCK_SEQPACKET` socket to the prober): one message
//! per probe, one byte carrying three descriptors (control socket, stdout, stderr). The zygote
//! forks and lets go of them; the child's first word on the control socket is one byte carrying
//! its own pidfd, through which the prober signals it and sees it exit. The zygote reaps its
//! children as they exit (a `signalfd` for `SIGCHLD`, polled with the socket), so their CPU
//! time is counted in its own children's time, as a helper's is in the prober's; it exits when
//! the prober closes the socket.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::ForkResult;
use std::os::fd::AsFd;

use super::failure::{Res, err};
use super::start::Start;
use crate::direct_exec::sys;

/// The hidden second argument (after [`super::HELPER_ARG`]) that makes the helper the zygote.
pub const ZYGOTE_ARG: &str = "--zygote";

/// The descriptors of one probe, in the order they are sent.
const PER_PROBE: usize = sys::MAX_PASSED_FDS;

/// Serves forks until the prober closes the socket; returns only in a child, with what the
/// zygote learnt, for the child to go on as a helper.
pub(super) fn serve() -> Start {
    match setup().and_then(|(start, exits)| serve_loop(start, exits)) {
        Ok(start) => start,
        // Nobody reads the zygote's stderr: the prober sees it exit and falls back to a helper
        // of the probe's own.
        Err(_) => std::process::exit(125),
    }
}

/// `SIGCHLD` alone.
fn sigchld() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    set
}

/// What the children must not inherit from the zygote's start, what every child would learn
/// the same at its start (learnt once, here), and the `signalfd` that says a child exited
/// (`SIGCHLD` blocked, so that it is only ever read there).
fn setup() -> Res<(Start, SignalFd)> {
    // Whatever the zygote was started with beyond stdio (it should be nothing) is closed, so
    // that a child holds only the probe's descriptors.
    sys::close_range(3, u32::MAX).map_err(err("close_range"))?;
    // Before `SIGCHLD` is blocked: the dispositions are a fresh helper's.
    let start = Start::learn()?;
    sigchld().thread_block().map_err(err("block SIGCHLD"))?;
    let exits = SignalFd::with_flags(&sigchld(), SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(err("signalfd"))?;
    Ok((start, exits))
}

/// One fork per request, and the exited children reaped, until the socket is closed; in a
/// child, returns what the zygote learnt.
fn serve_loop(start: Start, exits: SignalFd) -> Res<Start> {
    loop {
        let stdin = std::io::stdin();
        let (request, exited) = {
            let mut fds = [
                PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
                PollFd::new(exits.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(format!("poll: {e}")),
            }
            let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        if exited {
            reap(&exits);
        }
        if !request {
            continue;
        }
        let fds = match next_request()? {
            Request::Probe(fds) => fds,
            Request::Closed => std::process::exit(0),
            Request::Skipped => continue,
        };
        match sys::fork() {
            Ok(ForkResult::Child) => return Ok(become_helper(start, exits, fds)),
            // The child holds the descriptors now; a failed fork drops them, and the prober
            // reads the end of the control socket without a pidfd.
            Ok(ForkResult::Parent { .. }) | Err(_) => drop(fds),
        }
    }
}

/// Reaps every child that has exited (one `SIGCHLD` may stand for several).
fn reap(exits: &SignalFd) {
    while let Ok(Some(_)) = exits.read_signal() {}
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// What one message on the request socket was.
enum Request {
    /// A probe's control socket, stdout and stderr.
    Probe([OwnedFd; PER_PROBE]),
    /// The prober closed the socket.
    Closed,
    /// Nothing to serve: no message after all, or one without exactly three descriptors
    /// (dropped, whatever it carried closed).
    Skipped,
}

/// Reads the next request (the socket is readable).
fn next_request() -> Res<Request> {
    let got = match sys::receive_fds(libc::STDIN_FILENO) {
        Ok(got) => got,
        Err(Errno::EINTR | Errno::EAGAIN) => return Ok(Request::Skipped),
        Err(e) => return Err(format!("receive a request: {e}")),
    };
    if got.bytes == 0 && got.fds.is_empty() {
        return Ok(Request::Closed);
    }
    Ok(<[OwnedFd; PER_PROBE]>::try_from(got.fds).map_or(Request::Skipped, Request::Probe))
}

/// In the child: the probe's descriptors become stdin, stdout and stderr, the zygote's socket
/// and `signalfd` are closed, `SIGCHLD` is unblocked again (a started helper begins with no
/// signal blocked), and the child tells the prober its pidfd before it goes on as a freshly
/// started helper would.
fn become_helper(
    start: Start,
    exits: SignalFd,
    [control, stdout, stderr]: [OwnedFd; PER_PROBE],
) -> Start {
    let ready = (|| -> Res<()> {
        drop(exits);
        sigchld().thread_unblock().map_err(err("unblock SIGCHLD"))?;
        nix::unistd::dup2_stdin(&control).map_err(err("dup2 stdin"))?;
        nix::unistd::dup2_stdout(&stdout).map_err(err("dup2 stdout"))?;
        nix::unistd::dup2_stderr(&stderr).map_err(err("dup2 stderr"))?;
        drop((control, stdout, stderr));
        let me = sys::pidfd_open(std::process::id() as i32).map_err(err("pidfd_open"))?;
        let fds = [me.as_raw_fd()];
        sendmsg::<()>(
            libc::STDIN_FILENO,
            &[IoSlice::new(b"p")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(err("send the pidfd"))?;
        Ok(())
    })();
    match ready {
        Ok(()) => start,
        // The prober reads the control socket's end without a pidfd and errors the probe.
        Err(_) => std::process::exit(125),
    }
}
