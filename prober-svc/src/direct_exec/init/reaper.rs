//! Stage 2: the reaper, the probe's first process in the container's PID namespace.
//!
//! It keeps every capability of the prober (it must start the command as the runtime would),
//! so it shares nothing the container can use: it is not dumpable (so the container can open
//! none of its `/proc` files that matter), the command is a plain `fork` of it (a copy of its
//! memory, not its memory), and it holds no descriptor but the control socket and `/dev/null`.
//! What the container can do to it is what its uid allows: stop it or kill it, which only ends
//! this probe (the helper kills the tree itself when the reaper does not finish).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::command;
use super::descriptors::{close_all_but, release_stdio};
use super::failure::{Res, err};
use super::namespaces::{self, Join};
use crate::direct_exec::plan::{Plan, Report};
use crate::direct_exec::sys;

/// Runs the reaper (forked from the helper, with `SIGCHLD` and `SIGTERM` blocked; `helper` is
/// the non-blocking read end of a pipe whose write end only the helper holds); returns its exit
/// code.
pub(super) fn run(
    control: &UnixStream,
    plan: &Plan,
    devnull: File,
    signals: sys::Dispositions,
    joins: Vec<Join>,
    helper: OwnedFd,
) -> Res<i32> {
    // A helper killed (the prober gave up on it) takes the reaper along; it may have died
    // before this line (its PID is not in this PID namespace, so getppid says 0 and a pidfd of
    // it cannot be used here: the pipe's end of file says it).
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(err("set parent death signal"))?;
    match nix::unistd::read(&helper, &mut [0u8; 1]) {
        Err(nix::errno::Errno::EAGAIN) => {}
        _ => return Err("the exec helper is gone".to_owned()),
    }
    drop(helper);
    namespaces::enter(&joins)?;
    drop(joins);
    // Inside the container now: nothing but stdio, the control socket and /dev/null stays open
    // (whatever the prober itself inherited, even close-on-exec, must not be reachable before
    // the command's execve: runc's CVE-2024-21626).
    close_all_but(&[control.as_raw_fd(), devnull.as_raw_fd()])?;
    nix::sys::prctl::set_child_subreaper(true).map_err(err("set child subreaper"))?;
    let command = match sys::fork().map_err(err("fork"))? {
        ForkResult::Child => {
            let e = match command::run(plan, control, &devnull, signals) {
                Ok(never) => match never {},
                Err(e) => e,
            };
            let _ = (&*control).write_all(Report::Failed(e).line().as_bytes());
            std::process::exit(127)
        }
        ForkResult::Parent { child } => child,
    };
    release_stdio(&devnull)?;
    drop(devnull);
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
