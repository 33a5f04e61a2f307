//! The helper's part once the intermediate process is forked: wait for it to exit with the
//! reaper's PID, let the reaper go on (it is the helper's child then: the helper is a child
//! subreaper), and supervise it — on `SIGTERM` (the probe is over) tell it, and kill the whole
//! tree itself if the reaper does not finish in time (the container can stop or kill the
//! reaper). The helper stays in the prober's namespaces and cgroups throughout: it reads the
//! host's `/proc`, and the container can neither see nor signal it.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::failure::{Res, err};
use super::stat::state;
use crate::direct_exec::plan::Report;
use crate::direct_exec::sys;

/// How long the reaper has, once told the probe is over, to kill and reap the command's tree
/// before the helper kills it all itself.
const REAPER_GRACE: Duration = Duration::from_millis(500);

/// Rounds of killing the reaper's children (each round's dead pass their own children to the
/// stopped reaper, the subreaper) before the reaper itself is killed.
const KILL_ROUNDS: usize = 50;

/// What the helper holds of the intermediate process.
pub(super) struct Intermediate {
    /// Its PID (the helper's unreaped child: the PID stays its own).
    pub(super) pid: Pid,
    /// The read end of the pipe it writes the reaper's PID to (non-blocking).
    pub(super) reaper_pid: OwnedFd,
    /// The write end of the pipe the reaper waits on: a byte says the reaper is the helper's
    /// child; its end of file (the helper gone) ends the reaper.
    pub(super) go: OwnedFd,
    /// The helper's end of the socket the reaper hands it the command's pidfd on.
    pub(super) command: UnixStream,
}

/// Waits for the intermediate process, then supervises the reaper; returns the helper's exit
/// code (`waited`: `SIGCHLD` and `SIGTERM`, blocked).
pub(super) fn run(control: &UnixStream, stage: Intermediate, waited: &SigSet) -> Res<i32> {
    let mut told = false;
    let status = loop {
        match waitpid(stage.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            Ok(status) => break status,
            Err(e) => return Err(format!("wait for the intermediate process: {e}")),
        }
        if let Some(Signal::SIGTERM) =
            sys::wait_signal(waited, Duration::from_secs(3600)).map_err(err("sigtimedwait"))?
        {
            // Over before the reaper was forked: the intermediate process is the helper's own
            // child, in the host's PID namespace.
            told = true;
            let _ = kill(stage.pid, Signal::SIGKILL);
        }
    };
    // Written before it exited, if at all.
    let mut word = [0u8; 4];
    let reaper = match nix::unistd::read(&stage.reaper_pid, &mut word) {
        Ok(4) => Some(Pid::from_raw(i32::from_ne_bytes(word))),
        _ => None,
    };
    let Some(reaper) = reaper else {
        // It reported why on the control socket (or was killed before it could fork).
        return Ok(match status {
            WaitStatus::Exited(_, c) => c,
            WaitStatus::Signaled(_, s, _) => 128 + s as i32,
            _ => 125,
        });
    };
    if told {
        // Reparented to the helper with the intermediate's exit: the helper's child.
        kill_tree(reaper);
    } else {
        nix::unistd::write(&stage.go, b"g").map_err(err("let the reaper go on"))?;
    }
    // Held until the helper exits: the reaper's check that its parent is alive.
    let _go = stage.go;
    let code = supervise(control, reaper, waited, told)?;
    end_command(&stage.command);
    Ok(code)
}

/// Kills the command, whatever the reaper did (the container can stop the command and kill
/// the reaper), and waits until it is gone: the helper, and with it the probe's place in
/// flight, outlives no process of the probe. The reaper handed its pidfd over before the
/// command could leave its process group (a reaper killed before that took the command along:
/// its parent death signal, or the end of the reaper's group in [`ended`]).
fn end_command(link: &UnixStream) {
    let Ok(mut got) = sys::receive_fds(link.as_raw_fd()) else {
        return;
    };
    let Some(pidfd) = got.fds.pop() else { return };
    // A pidfd names one process for good: one that has exited gets nothing.
    if sys::pidfd_signal(&pidfd, Some(Signal::SIGKILL)).is_err() {
        return;
    }
    // Readable once it has exited (a process of a frozen cgroup dies only when thawed).
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    while let Err(nix::errno::Errno::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
}

/// Waits for the reaper; on `SIGTERM` passes the end of the probe on, and kills the tree itself
/// if the reaper has not finished [`REAPER_GRACE`] later.
///
/// The reaper's exit is watched on its pidfd, not by `waitpid` alone: a container granted
/// `SYS_PTRACE` can attach to the reaper, and a traced process's exit goes to its tracer, which
/// may never pass it on to the helper.
fn supervise(control: &UnixStream, reaper: Pid, waited: &SigSet, forced: bool) -> Res<i32> {
    let pidfd = sys::pidfd_open(reaper.as_raw()).map_err(err("pidfd_open the reaper"))?;
    let signals = SignalFd::with_flags(waited, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(err("signalfd"))?;
    let mut told: Option<Instant> = None;
    let mut forced = forced;
    loop {
        let wait = match told {
            Some(t) if !forced => REAPER_GRACE.saturating_sub(t.elapsed()),
            _ => Duration::from_secs(3600),
        };
        let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        let ready = match poll(&mut fds, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll the reaper: {e}")),
        };
        if fds[0].any().unwrap_or(true) {
            return Ok(ended(control, reaper, forced));
        }
        while let Ok(Some(info)) = signals.read_signal() {
            if info.ssi_signo == Signal::SIGTERM as u32 && told.is_none() {
                told = Some(Instant::now());
                // A reaper the container stopped gets going again to do its part.
                let _ = kill(reaper, Signal::SIGCONT);
                let _ = kill(reaper, Signal::SIGTERM);
            }
        }
        if ready == 0 && told.is_some() && !forced {
            forced = true;
            kill_tree(reaper);
        }
    }
}

/// The reaper has exited: ends its process group, then reaps it; returns the helper's exit
/// code.
///
/// A command the container held stopped from its birth, and orphaned by killing the reaper, is
/// still in the reaper's group, with no parent death signal and no pidfd handed over. The group
/// is ended while the reaper is unreaped, so that its PID (the group's ID) names nothing else.
fn ended(control: &UnixStream, reaper: Pid, forced: bool) -> i32 {
    let _ = killpg(reaper, Signal::SIGKILL);
    let killed = 128 + Signal::SIGKILL as i32;
    let code = match waitpid(reaper, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, c)) => return c,
        Ok(WaitStatus::Signaled(_, s, _)) => 128 + s as i32,
        // A reaper the container traces: its exit is its tracer's to see first. As far as the
        // probe can tell, it was killed.
        _ => killed,
    };
    if code == killed && !forced {
        // The container's init exited and the PID namespace's teardown killed the reaper and
        // the command (or the container killed the reaper). runc reports such an exec as killed
        // by SIGKILL (exit 137); say so, unless the reaper reported the command's exit first
        // (the prober keeps the first report).
        let _ = (&*control).write_all(Report::Exited(code).line().as_bytes());
    }
    code
}

/// Kills the reaper's tree from outside: the reaper stopped (it cannot reap, so its children's
/// PIDs stay theirs), its children killed round after round (orphans come to the reaper, the
/// subreaper), then the reaper. The helper reads the host's `/proc`: it never entered the
/// container's mount namespace.
fn kill_tree(reaper: Pid) {
    let _ = kill(reaper, Signal::SIGSTOP);
    let r = reaper.as_raw();
    for _ in 0..KILL_ROUNDS {
        let live: Vec<Pid> = std::fs::read_to_string(format!("/proc/{r}/task/{r}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p: &i32| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| state(&s).is_some_and(|c| c != 'Z'))
            })
            .map(Pid::from_raw)
            .collect();
        if live.is_empty() {
            break;
        }
        for p in live {
            let _ = kill(p, Signal::SIGKILL);
        }
        // The killed exit in the kernel's time; their children then come to the reaper.
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = kill(reaper, Signal::SIGKILL);
}
