//! Stage 3: the reaper, the probe's first process in the container's PID namespace, born in
//! every namespace and cgroup of the container (the intermediate process joined them before it
//! forked the reaper).
//!
//! Until it has forked the command it holds the prober's privileges (the command must start as
//! the runtime would start it), and shares nothing the container can use: it is not dumpable,
//! the command is a plain `fork` of it (a copy of its memory, not its memory), and it holds no
//! descriptor but the control socket, `/dev/null` and the helper's pipe. Once the command is
//! forked it drops to the plan's credentials ([`super::privileges`]): what runs in it from
//! then on, even code a ptrace-capable container put there, holds no more than the container.
//! The container can stop it or kill it: that only ends this probe (the helper kills the tree
//! itself when the reaper does not finish).

use std::fs::File;
use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::command;
use super::descriptors::{close_all_but, release_stdio};
use super::failure::{Res, err, report_failed};
use super::privileges;
use crate::direct_exec::plan::{Plan, Report};
use crate::direct_exec::sys;

/// What the intermediate process hands on to the reaper.
pub(super) struct ForReaper<'a> {
    pub(super) devnull: File,
    pub(super) signals: sys::Dispositions,
    pub(super) filter: &'a [u8],
    /// The read end of the helper's pipe: a byte when the reaper is the helper's child, the
    /// end of file when the helper is gone.
    pub(super) parent: OwnedFd,
    /// The reaper's end of the socket it hands the helper the command's pidfd on.
    pub(super) command_link: UnixStream,
}

/// Runs the reaper (forked from the intermediate process, with `SIGCHLD` and `SIGTERM`
/// blocked); returns its exit code.
pub(super) fn run(control: &UnixStream, plan: &Plan, hand_on: ForReaper<'_>) -> Res<i32> {
    let ForReaper {
        devnull,
        signals,
        filter,
        parent,
        command_link,
    } = hand_on;
    // The helper's byte: the intermediate process has exited and the reaper is the helper's
    // child. The end of file: the helper is gone.
    match nix::unistd::read(&parent, &mut [0u8; 1]) {
        Ok(1) => {}
        _ => return Err("the exec helper is gone".to_owned()),
    }
    // Nothing but stdio, the control socket, /dev/null and the helper's pipe stays open (whatever
    // the prober itself inherited, even close-on-exec, must not be reachable before the
    // command's execve: runc's CVE-2024-21626).
    close_all_but(&[
        control.as_raw_fd(),
        devnull.as_raw_fd(),
        parent.as_raw_fd(),
        command_link.as_raw_fd(),
    ])?;
    nix::sys::prctl::set_child_subreaper(true).map_err(err("set child subreaper"))?;
    // The reaper leads a process group of its own, which the command is born in and leaves only
    // at its `setsid`, after the helper holds its pidfd. A command the container stopped before
    // it could ask for its parent death signal, and then orphaned, is still in this group: the
    // helper ends the group when the reaper is gone. The container cannot move the command out
    // of it (a process group changes only within its session, and the container is not in the
    // prober's).
    nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(err("setpgid"))?;
    let me = nix::unistd::getpid();
    // The reaper's word that the helper holds the command's pidfd (close-on-exec: gone at the
    // command's execve).
    let (handed_reader, handed_writer) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(err("pipe"))?;
    let command = match sys::fork().map_err(err("fork"))? {
        ForkResult::Child => {
            drop(handed_writer);
            // A reaper killed before the helper holds the command's pidfd takes the command
            // along; one killed before this line shows as another parent (and one killed while
            // the container held the command stopped before this line leaves it in the reaper's
            // process group, which the helper ends).
            if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
                || nix::unistd::getppid() != me
            {
                std::process::exit(127)
            }
            // The command's change of credentials clears the parent death signal: it waits
            // until the helper holds its pidfd, so that no moment leaves it held by nobody, and
            // until the reaper has dropped its privileges and entered its filter. The end of the
            // pipe without the byte: the reaper is gone or gave up.
            if !matches!(nix::unistd::read(&handed_reader, &mut [0u8; 1]), Ok(1)) {
                std::process::exit(127)
            }
            drop(handed_reader);
            let e = match command::run(plan, control, &devnull, signals) {
                Ok(never) => match never {},
                Err(e) => e,
            };
            report_failed(control, e);
            std::process::exit(127)
        }
        ForkResult::Parent { child } => child,
    };
    // The helper holds the command for good (a pidfd), whatever becomes of the reaper: the
    // command is the reaper's unreaped child, so its PID is still its own.
    let handed = sys::pidfd_open(command.as_raw())
        .map_err(err("pidfd_open the command"))
        .and_then(|pidfd| {
            sendmsg::<()>(
                command_link.as_raw_fd(),
                &[IoSlice::new(b"c")],
                &[ControlMessage::ScmRights(&[pidfd.as_raw_fd()])],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                None,
            )
            .map_err(err("hand the helper the command's pidfd"))
        });
    drop(command_link);
    drop(handed_reader);
    if let Err(e) = handed {
        kill_tree(command);
        return Err(e);
    }
    release_stdio(&devnull)?;
    drop(devnull);
    let dropped = privileges::drop_to(plan).and_then(|()| {
        // The change of credentials cleared the parent death signal: a helper the prober
        // killed takes the reaper along from here on; one already gone shows as the end of its
        // pipe.
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(err("set parent death signal"))?;
        nix::fcntl::fcntl(
            &parent,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(err("helper pipe"))?;
        match nix::unistd::read(&parent, &mut [0u8; 1]) {
            Err(nix::errno::Errno::EAGAIN) => Ok(()),
            _ => Err("the exec helper is gone".to_owned()),
        }
    });
    let dropped = dropped.and_then(|()| privileges::confine(filter));
    drop(parent);
    // The command goes on (its change of credentials, its execve) only now, when the reaper
    // holds nothing a process attaching to it could use: the command is what shows a container
    // that a probe runs, and its parent is this reaper.
    let dropped = dropped.and_then(|()| {
        nix::unistd::write(&handed_writer, b"h")
            .map(drop)
            .map_err(err("tell the command the helper holds it"))
    });
    drop(handed_writer);
    if let Err(e) = dropped {
        kill_tree(command);
        return Err(e);
    }
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    waited.add(Signal::SIGTERM);
    let mut reported = false;
    let mut killing = false;
    loop {
        // Reap everything that has exited (signals coalesce; one SIGCHLD may stand for many).
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(WaitStatus::Exited(p, c)) if p == command => {
                    report_exit(control, &mut reported, c);
                }
                Ok(WaitStatus::Signaled(p, s, _)) if p == command => {
                    report_exit(control, &mut reported, 128 + s as i32);
                }
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::ECHILD) => return Ok(0),
                Err(e) => return Err(format!("wait: {e}")),
            }
        }
        if killing {
            kill_tree(command);
        }
        match waited.wait() {
            Ok(Signal::SIGTERM) => {
                killing = true;
                kill_tree(command);
            }
            Ok(_) => {}
            Err(e) => return Err(format!("sigwait: {e}")),
        }
    }
}

fn report_exit(control: &UnixStream, reported: &mut bool, code: i32) {
    if !*reported {
        *reported = true;
        let _ = (&*control).write_all(Report::Exited(code).line().as_bytes());
    }
}

/// SIGKILL to the command's process group and to every child of the reaper (orphans that left
/// the group come to the reaper, the subreaper, when their parents die).
fn kill_tree(command: Pid) {
    let _ = nix::sys::signal::killpg(command, Signal::SIGKILL);
    let me = nix::unistd::getpid();
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")) {
        for p in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}
