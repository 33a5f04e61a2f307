//! What the reaper keeps once the command is forked: the plan's user, group and supplementary
//! groups, no capability but `CAP_KILL` (the command is still root until its own `setuid`, and
//! the reaper must be able to kill it), an empty bounding set, no_new_privs, and a seccomp
//! filter that allows only what waiting, reaping, killing and reporting take.
//!
//! The reaper is the probe's one long-lived process in the container, and the container sees
//! it: a container that may ptrace it (`SYS_PTRACE`, or a sibling in a shared PID namespace
//! that has it) can run code in it. What that code then holds is what the container's own
//! process holds, less: the same credentials, no capability to mount, to change namespaces, to
//! raise anything back (no_new_privs, an empty bounding set), and every call outside the filter
//! answered `EPERM`. Its descriptors are the control socket (to the prober: a report line, as
//! the command's own exit gives) and, until the checks after the drop, the helper's pipe.

use caps::{CapSet, Capability, CapsHashSet};
use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nix::unistd::{Gid, Uid};

use super::failure::{Res, err};
use crate::direct_exec::plan::Plan;
use crate::direct_exec::seccomp;
use crate::direct_exec::sys;

/// The system calls the reaper makes after its drop: waiting for signals and children,
/// killing the command's tree (its `/proc` children list read), reporting on the control
/// socket, memory for those, and exiting.
const REAPER_SYSCALLS: [&str; 38] = [
    "read",
    "write",
    "writev",
    "sendto",
    "sendmsg",
    "getppid",
    "close",
    "openat",
    "fstat",
    "newfstatat",
    "statx",
    "lseek",
    "getpid",
    "gettid",
    "kill",
    "tgkill",
    "tkill",
    "wait4",
    "waitid",
    "rt_sigtimedwait",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigaction",
    "sigaltstack",
    "restart_syscall",
    "pidfd_send_signal",
    "mmap",
    "munmap",
    "mremap",
    "brk",
    "madvise",
    "futex",
    "sched_yield",
    "nanosleep",
    "clock_nanosleep",
    "clock_gettime",
    "exit",
    "exit_group",
];

/// The reaper's filter, compiled (libseccomp, the native architecture; another architecture's
/// calls kill the process, every other call fails with `EPERM`). The same for every probe: a
/// standby zygote compiles it once and its helpers inherit it.
pub(super) fn reaper_filter() -> Res<Vec<u8>> {
    let mut filter =
        ScmpFilterContext::new(ScmpAction::Errno(libc::EPERM)).map_err(err("reaper filter"))?;
    for name in REAPER_SYSCALLS {
        // A name this architecture lacks (`newfstatat` on some) is simply not allowed.
        if let Ok(nr) = ScmpSyscall::from_name(name) {
            filter
                .add_rule(ScmpAction::Allow, nr)
                .map_err(err(format!("reaper filter: {name}")))?;
        }
    }
    seccomp::export(&filter).map_err(err("reaper filter"))
}

/// Drops the reaper to the plan's credentials with `CAP_KILL` alone and an empty bounding
/// set; non-dumpable again afterwards (a change of credentials resets it to the node's
/// `fs.suid_dumpable`). [`confine`] follows.
pub(super) fn drop_to(plan: &Plan) -> Res<()> {
    // The bounding set first, while CAP_SETPCAP is still held.
    for c in caps::all() {
        match caps::drop(None, CapSet::Bounding, c) {
            Ok(()) => {}
            // A capability this kernel does not know.
            Err(e) if e.to_string().contains("Invalid argument") => {}
            Err(e) => return Err(format!("reaper: bounding set: {e}")),
        }
    }
    let groups: Vec<Gid> = plan.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(err("reaper: setgroups"))?;
    let (uid, gid) = (Uid::from_raw(plan.uid), Gid::from_raw(plan.gid));
    nix::unistd::setresgid(gid, gid, gid).map_err(err("reaper: setresgid"))?;
    nix::sys::prctl::set_keepcaps(true).map_err(err("reaper: keep caps"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(err("reaper: setresuid"))?;
    nix::sys::prctl::set_keepcaps(false).map_err(err("reaper: keep caps"))?;
    let kill: CapsHashSet = [Capability::CAP_KILL].into_iter().collect();
    caps::clear(None, CapSet::Inheritable).map_err(err("reaper: inheritable"))?;
    caps::set(None, CapSet::Effective, &kill).map_err(err("reaper: effective"))?;
    caps::set(None, CapSet::Permitted, &kill).map_err(err("reaper: permitted"))?;
    // Empty already (nothing raised it); cleared again where the kernel has the set.
    let _ = caps::clear(None, CapSet::Ambient);
    nix::sys::prctl::set_dumpable(false).map_err(err("reaper: non-dumpable"))
}

/// no_new_privs and `filter` (from [`reaper_filter`]): from here the reaper makes no call
/// outside the filter.
pub(super) fn confine(filter: &[u8]) -> Res<()> {
    nix::sys::prctl::set_no_new_privs().map_err(err("reaper: no_new_privs"))?;
    sys::load_seccomp(filter, 0).map_err(err("reaper: seccomp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaper_filter_compiles_to_a_program() {
        let bpf = reaper_filter().expect("compiled");
        assert!(
            !bpf.is_empty() && bpf.len().is_multiple_of(8),
            "{} bytes",
            bpf.len()
        );
    }
}
