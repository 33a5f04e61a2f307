//! Stage 2: the intermediate process, runc's `nsexec` stage that joins the container before
//! anything is in it. Forked from the helper, in the host's PID namespace (the container never
//! sees it), it joins the container's cgroups (v1 by writing itself to each `tasks` file; v2
//! by forking the reaper into it), then every namespace of the container in runc's order —
//! ipc, uts, net, pid (for its children), mnt, cgroup, time (for its children) — and only then
//! forks the reaper, the probe's first process in the container's PID namespace: the reaper is
//! born in every namespace and cgroup of the container, so nothing of the prober's is ever
//! visible from inside it. It tells the helper the reaper's PID and exits; the reaper comes to
//! the helper (a child subreaper).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::unistd::ForkResult;

use super::failure::{Res, err, exit_with};
use super::namespaces::{self, Join};
use super::reaper::{self, ForReaper};
use crate::direct_exec::plan::Plan;
use crate::direct_exec::sys;

/// Runs the intermediate process; returns its exit code (the reaper never returns from here).
pub(super) fn run(
    control: &UnixStream,
    plan: &Plan,
    joins: Vec<Join>,
    reaper_pid: OwnedFd,
    hand_on: ForReaper<'_>,
) -> Res<i32> {
    // Every path below is the host's: the cgroups are joined, and the v2 directory opened,
    // before the container's mount namespace.
    for file in &plan.cgroups.v1_tasks {
        join_by_write(file)?;
    }
    let v2 = plan
        .cgroups
        .v2_dir
        .as_deref()
        .map(|d| File::open(d).map_err(err(format!("open cgroup {}", d.display()))))
        .transpose()?;
    namespaces::enter(&joins)?;
    drop(joins);
    match fork_reaper(v2.as_ref().map(File::as_fd))? {
        ForkResult::Child => {
            drop((reaper_pid, v2));
            exit_with(control, reaper::run(control, plan, hand_on))
        }
        ForkResult::Parent { child } => {
            nix::unistd::write(&reaper_pid, &child.as_raw().to_ne_bytes())
                .map_err(err("tell the helper the reaper's PID"))?;
            Ok(0)
        }
    }
}

/// Writes `0` (the writer) to a cgroup's `tasks` or `cgroup.procs` file: the writer moves
/// there.
fn join_by_write(file: &Path) -> Res<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .and_then(|mut f| f.write_all(b"0"))
        .map_err(err(format!("join cgroup {}", file.display())))
}

/// Forks the reaper, into the container's v2 cgroup `v2` (when its init has one) by `clone3`
/// with `CLONE_INTO_CGROUP`. Where the kernel (or a seccomp profile around the prober) has no
/// such `clone3`, or the C library would not stay sound in its child, this process joins the
/// cgroup through its `cgroup.procs` (opened beside the directory it already holds: no path of
/// the container's mount namespace) and forks.
fn fork_reaper(v2: Option<BorrowedFd<'_>>) -> Res<ForkResult> {
    let Some(dir) = v2 else {
        return sys::fork().map_err(err("fork"));
    };
    if sys::clone3_keeps_libc_sound() {
        match sys::fork_into_cgroup(dir) {
            Ok(forked) => return Ok(forked),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM)
                ) => {}
            Err(e) => return Err(format!("clone3 into the container's cgroup: {e}")),
        }
    }
    let procs = nix::fcntl::openat(
        dir,
        "cgroup.procs",
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(err("open the container's cgroup.procs"))?;
    nix::unistd::write(&procs, b"0").map_err(err("join the container's v2 cgroup"))?;
    sys::fork().map_err(err("fork"))
}
