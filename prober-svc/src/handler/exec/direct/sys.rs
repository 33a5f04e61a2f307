//! The few system calls the exec helper needs that have no safe wrapper in `nix`, `caps` or
//! `libseccomp`: `fork` (unsafe in `nix` because a multi-threaded parent may hold locks in the
//! child), `clone` sharing memory until `execve`, loading a pre-compiled seccomp program,
//! joining a session keyring, and resetting signal actions (Rust's runtime ignores `SIGPIPE` at
//! start, and `execve` would pass an ignored signal on).
//!
//! Everything here runs only in the helper (`super::init`), which is single-threaded from its
//! first line to its `execve`: it never starts a thread, and [`assert_single_threaded`] checks
//! that before the first fork.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;

use nix::unistd::ForkResult;

/// Fails unless this process has exactly one thread (`/proc/self/task` has one entry).
pub(crate) fn assert_single_threaded() -> io::Result<()> {
    let n = std::fs::read_dir("/proc/thread-self/..")?.count();
    if n == 1 {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "the exec helper has {n} threads, expected 1"
        )))
    }
}

/// Marks every descriptor from 3 up close-on-exec (runc's `CloseExecFrom(3)`): whatever the
/// prober itself inherited without the flag (a jobserver pipe, a supervisor's socket) must not
/// reach the container.
pub(crate) fn cloexec_from_3() -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes descriptor flags; no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if rc == 0 {
        return Ok(());
    }
    // Before Linux 5.11: one fcntl per open descriptor.
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= 3)
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on a number that may have been the directory stream's (closed by
        // now): fcntl then fails with EBADF, which is ignored; no memory is passed.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

/// `fork(2)`.
pub(crate) fn fork() -> nix::Result<ForkResult> {
    // SAFETY: the helper is single-threaded (`assert_single_threaded` ran before the first
    // fork, and nothing starts a thread), so no lock or allocator state can be held by another
    // thread at the fork; the child may call anything the parent could.
    unsafe { nix::unistd::fork() }
}

/// Runs `child` in a new process that shares this one's memory until it calls `execve` or
/// exits — `clone(CLONE_VM | CLONE_VFORK)`, what glibc's `posix_spawn` and Go's `forkExec` (so
/// runc) use: no page tables copied, no copy-on-write faults, nothing to tear down at its
/// `execve`. This process is suspended until then. `child` ends in `execve` or returns its exit
/// code; the process then leaves with the `exit` system call (no exit handlers, no buffers
/// flushed: they are this process's).
pub(crate) fn spawn_shared(child: &mut dyn FnMut() -> i32) -> io::Result<nix::unistd::Pid> {
    /// The child's stack: what the command's set-up needs (capabilities sets, a few strings),
    /// with room to spare; untouched pages cost nothing.
    const STACK_BYTES: usize = 1 << 20;
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut &mut dyn FnMut` below, alive while the parent is suspended;
        // a panic cannot unwind out of this `extern "C"` function (it aborts the child).
        let f = unsafe { &mut *arg.cast::<&mut dyn FnMut() -> i32>() };
        f()
    }
    let mut stack = vec![0u8; STACK_BYTES];
    // The stack grows down: start at its (16-byte aligned) top.
    let top = (stack.as_mut_ptr() as usize + STACK_BYTES) & !15;
    let mut f: &mut dyn FnMut() -> i32 = child;
    // SAFETY: the helper is single-threaded (`assert_single_threaded`), and with CLONE_VFORK
    // this thread is suspended until the child has exec'd or exited, so nothing else uses the
    // shared memory while the child runs (it may allocate: what it leaves in the heap is never
    // freed, the helper's processes are short-lived). `stack` and `f` outlive the child's use of
    // them for the same reason. Without CLONE_SIGHAND/CLONE_FILES/CLONE_FS the child's signal
    // actions, descriptors, cwd and credentials are its own.
    let pid = unsafe {
        libc::clone(
            trampoline,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut f as *mut &mut dyn FnMut() -> i32).cast(),
        )
    };
    drop(stack);
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(nix::unistd::Pid::from_raw(pid))
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)` (or `prctl(PR_SET_SECCOMP)` without flags,
/// as runc does) with a program of `struct sock_filter` entries in native byte order.
pub(crate) fn load_seccomp(bpf: &[u8], flags: u32) -> io::Result<()> {
    if bpf.is_empty() || !bpf.len().is_multiple_of(8) || bpf.len() / 8 > usize::from(u16::MAX) {
        return Err(io::Error::other(format!(
            "bad seccomp program of {} bytes",
            bpf.len()
        )));
    }
    let filters: Vec<libc::sock_filter> = bpf
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let prog = libc::sock_fprog {
        len: filters.len() as u16,
        filter: filters.as_ptr().cast_mut(),
    };
    let rc = if flags == 0 {
        // SAFETY: `prog` points to `filters`, both alive for the call; the kernel copies the
        // program and keeps no pointer.
        unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            )
        }
    } else {
        // SAFETY: as above; `flags` are SECCOMP_FILTER_FLAG_* bits the kernel validates.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::c_ulong::from(flags),
                &prog as *const libc::sock_fprog,
            ) as libc::c_int
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, name)`: runc gives every process of a container the
/// session keyring `_ses.<container id>`. `ENOSYS` (no keyrings in this kernel) is not an error,
/// as in runc.
pub(crate) fn join_session_keyring(name: &CStr) -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let rc = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, name.as_ptr()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
    }
    Ok(())
}

/// The signals whose action is not the default in this process (ignored, or caught), read
/// from `/proc/self/status` (`SigIgn`, `SigCgt`): an ignored signal stays ignored across
/// `execve` (Rust's runtime ignores `SIGPIPE`; the prober may inherit more), so the command's
/// process must set them back. Unreadable: every signal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dispositions(u64);

impl Dispositions {
    /// This process's, now (the helper reads them once; its children inherit them).
    pub(crate) fn of_self() -> Self {
        let mask = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let field = |name: &str| {
                    let line = status.lines().find_map(|l| l.strip_prefix(name))?;
                    u64::from_str_radix(line.trim(), 16).ok()
                };
                Some(field("SigIgn:")? | field("SigCgt:")?)
            })
            .unwrap_or(u64::MAX);
        Self(mask)
    }

    /// Every signal of the set back to its default action (one call per signal that is not,
    /// instead of one per signal number). The raw `rt_sigaction` call, because glibc refuses
    /// its two internal signals (32 and 33), which an ignoring parent passes on like any other.
    pub(crate) fn reset(self) {
        /// The kernel's `struct sigaction` on x86_64 and aarch64 (not glibc's).
        #[repr(C)]
        struct KernelSigaction {
            handler: libc::sighandler_t,
            flags: libc::c_ulong,
            restorer: usize,
            mask: u64,
        }
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP || self.0 & (1 << (sig - 1)) == 0 {
                continue;
            }
            // SAFETY: `default` is a valid kernel sigaction for the call (SIG_DFL installs no
            // handler, so no restorer is needed); the old action is not asked for. Failures
            // (an invalid number) leave the action as it was.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    std::mem::size_of::<u64>(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Dispositions;

    #[test]
    fn dispositions_hold_what_this_process_ignores_or_catches() {
        // Rust's runtime ignores SIGPIPE in every test process; SIGTERM keeps its default here.
        let d = Dispositions::of_self();
        let bit = |sig: i32| d.0 & (1 << (sig - 1)) != 0;
        assert!(bit(libc::SIGPIPE), "{:#x}", d.0);
        assert!(!bit(libc::SIGKILL), "{:#x}", d.0);
        assert_ne!(d.0, u64::MAX, "/proc/self/status was read");
    }
}
