//! The few system calls direct exec needs that have no safe wrapper in `nix`, `caps` or
//! `libseccomp`: `fork` (unsafe in `nix` because a multi-threaded parent may hold locks in the
//! child) and `clone3` into a cgroup, `close_range`, `sigtimedwait`, pidfds, descriptors
//! received with `SCM_RIGHTS`, a sealed `memfd` copy of the helper binary, loading a
//! pre-compiled seccomp program, joining a session keyring, signal actions (Rust's runtime
//! ignores `SIGPIPE` at start, and `execve` would pass an ignored signal on), and the start-up
//! hook that makes the helper non-dumpable before any of its code runs.
//!
//! Everything here but [`sealed_copy`], [`pidfd_signal`], [`receive_fds`] and
//! [`watch_exit`] (also the prober's) runs only in the helper (`super::init`), which is
//! single-threaded from its first line to its `execve`: it never starts a thread, and
//! [`assert_single_threaded`] checks that before the first fork.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::ForkResult;

/// Run by the C runtime before `main` and before Rust's own start-up, with `main`'s arguments
/// (glibc passes them to `.init_array` functions): in the exec helper, `PR_SET_DUMPABLE 0`
/// from its first instruction (runc's `nsexec` does the same as a constructor), so that no
/// process of the probe path is ever dumpable — no `/proc/<pid>/mem`, `maps`, `exe`, `fd` for
/// anyone without `CAP_SYS_PTRACE` over the prober's user namespace. `main` sets it again on
/// every C library (musl passes no arguments: this function then does nothing).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
pub(crate) static NON_DUMPABLE_AT_START: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = non_dumpable_at_start;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn non_dumpable_at_start(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes `main`'s argc and argv: argv[1] exists (argc >= 2) and is a
    // NUL-terminated string.
    let first = unsafe { *argv.add(1) };
    if first.is_null() {
        return;
    }
    // SAFETY: as above.
    let first = unsafe { CStr::from_ptr(first) };
    if first.to_bytes() == super::plan::HELPER_ARG.as_bytes() {
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
    }
}

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

/// `clone3(2)` with `CLONE_INTO_CGROUP`: a `fork` whose child starts in the cgroup v2 directory
/// `cgroup` (Linux 5.7), so that nothing has to move a process there (a write to
/// `cgroup.procs` takes the kernel's global threadgroup lock for writing, and with it an RCU
/// grace period; a fork takes it for reading). The error is the kernel's: `ENOSYS`, `E2BIG` or
/// `EINVAL` from a kernel without it (or a seccomp profile that refuses `clone3`), whatever
/// else the placement met (`EBADF`, `EACCES`, `EBUSY`...).
///
/// Hand-rolled: `libc` declares `clone_args` for some 64-bit targets only and its
/// `CLONE_INTO_CGROUP` as a 32-bit `c_int`; `nix` and the C library offer no `clone3`.
///
/// A raw `clone3` skips what glibc's `fork` does in the child: its `atfork` handlers, resetting
/// the locks it holds (none: the helper is single-threaded and inside no call of the library),
/// and writing the child's thread ID into the thread descriptor (glibc's `fork` has the kernel
/// do it, `CLONE_CHILD_SETTID`; the field is private). So the child's cached thread ID stays the
/// helper's. What reads it afterwards: the owner field of glibc's own recursive and
/// error-checking mutexes, compared with itself in a single-threaded child (consistent), and
/// `pthread_setschedparam`, `pthread_setname_np`, PI and robust mutexes on the calling thread,
/// none of which the reaper or Rust's runtime calls (Rust's locks are its own, over futexes, with
/// its own thread identity). `getpid`, `raise` and `abort` ask the kernel since glibc 2.25
/// ([`clone3_keeps_libc_sound`]). The reaper's own `fork` of the command is glibc's, which sets
/// the command's thread ID right.
pub(crate) fn fork_into_cgroup(cgroup: BorrowedFd<'_>) -> io::Result<ForkResult> {
    /// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: `args` lives across the call and its size is passed; no `CLONE_VM` and no stack:
    // the child is a copy of this process, as after `fork` (the rest of the argument is above).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match rc {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(ForkResult::Child),
        pid => Ok(ForkResult::Parent {
            child: nix::unistd::Pid::from_raw(pid as libc::pid_t),
        }),
    }
}

/// Whether the C library stays sound in a child of a raw `clone3` ([`fork_into_cgroup`]): glibc
/// 2.25 and later, which cache neither the PID nor, for `raise` and `abort`, the thread ID.
/// Other C libraries (musl caches the thread ID that `raise` uses) take the `cgroup.procs`
/// write instead.
pub(crate) fn clone3_keeps_libc_sound() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(libc::gnu_get_libc_version()) };
        let mut parts = v.to_str().unwrap_or("").split('.');
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts
            .next()
            .map(|p| {
                p.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        (major, minor) >= (2, 25)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// `close_range(first, last, 0)`: closes every descriptor in the range (Linux 5.9).
pub(crate) fn close_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors of this process; no memory is passed. Any
    // `OwnedFd` or `File` in the range must not be used afterwards: callers close only numbers
    // they own no Rust object for (or leak it).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `pidfd_open(pid, 0)` (Linux 5.3): a descriptor that names this one process for good (a
/// PID can be reused once its process is reaped; a pidfd cannot).
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// One message of direct exec's own descriptor passing, as received.
pub(crate) struct Received {
    /// Bytes of payload: 0 at the end of the socket (with no descriptor).
    pub(crate) bytes: usize,
    /// The payload's one byte (0 when there was none).
    pub(crate) first: u8,
    /// The descriptors it carried, owned (and so closed unless kept).
    pub(crate) fds: Vec<OwnedFd>,
}

/// The most descriptors a message carries (a probe's control socket, stdout and stderr); more
/// are closed by the kernel.
pub(crate) const MAX_PASSED_FDS: usize = 3;

/// Receives one message of one byte and its `SCM_RIGHTS` descriptors (close-on-exec) from the
/// socket `fd`, without blocking (`EAGAIN` when there is none).
pub(crate) fn receive_fds(fd: RawFd) -> nix::Result<Received> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_PASSED_FDS]);
    let msg = recvmsg::<()>(
        fd,
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel installed each of these descriptors in this process for the
            // message just received; nothing else refers to them, so each gets its only owner.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let bytes = msg.bytes;
    Ok(Received {
        bytes,
        first: if bytes > 0 { iov[0][0] } else { 0 },
        fds,
    })
}

/// `pidfd`, registered with the runtime for readability: a pidfd turns readable when its
/// process exits. (The prober's side: the pidfd a forked helper sent.)
pub(crate) fn watch_exit(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is an open descriptor that stays open, and names the same open file,
    // until the `AsyncFd` that owns it drops it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| e.into_parts().1)
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`; `None` sends no signal but says whether the
/// process is still alive (`ESRCH` once it has exited).
pub(crate) fn pidfd_signal(pidfd: &OwnedFd, sig: Option<Signal>) -> io::Result<()> {
    let sig = sig.map_or(0, |s| s as libc::c_int);
    // SAFETY: integers and a null siginfo pointer (the kernel then builds one).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `MFD_EXEC` (Linux 6.3; not in `libc` yet): the memfd may be executed even where
/// `vm.memfd_noexec` makes memfds non-executable by default.
const MFD_EXEC: libc::c_uint = 0x0010;

/// A sealed in-memory copy of the file at `path`, to execute instead of the file (runc's
/// `cloned_binary`): a process that runs it shows the copy as `/proc/<pid>/exe`, and the seals
/// (no write, no growing or shrinking, no further seal changes) make any descriptor anyone
/// reopens from it read-only in effect, whatever `path` is.
pub(crate) fn sealed_copy(path: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let name = c"podward-exec-helper";
    let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    let fd = match memfd_create(name, flags | MFdFlags::from_bits_retain(MFD_EXEC)) {
        Ok(fd) => fd,
        // Before Linux 6.3 the flag is unknown and every memfd is executable.
        Err(nix::errno::Errno::EINVAL) => memfd_create(name, flags)?,
        Err(e) => return Err(e.into()),
    };
    let mut copy = File::from(fd);
    let mut source = File::open(path)?;
    let n = io::copy(&mut source, &mut copy)?;
    if n == 0 {
        return Err(io::Error::other(format!("{} is empty", path.display())));
    }
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK;
    fcntl(&copy, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(OwnedFd::from(copy))
}

/// Waits up to `timeout` for one of `set` (blocked in this thread) to be pending and takes it;
/// `None` at the timeout.
pub(crate) fn wait_signal(set: &SigSet, timeout: Duration) -> io::Result<Option<Signal>> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    loop {
        // SAFETY: `set` is a valid sigset_t and `ts` a valid timespec for the call; no siginfo
        // is asked for.
        let rc = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if rc >= 0 {
            return Signal::try_from(rc).map(Some).map_err(io::Error::from);
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(None),
            // Another signal's handler ran: a shorter wait is harmless (callers loop).
            e if e.raw_os_error() == Some(libc::EINTR) => continue,
            e => return Err(e),
        }
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
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    use super::{Dispositions, sealed_copy};

    #[test]
    fn a_sealed_copy_reads_as_the_file_and_takes_no_write_through_any_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("helper");
        std::fs::write(&path, b"the helper's bytes").expect("write");
        let fd = sealed_copy(&path).expect("sealed copy");
        let reopened = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mut text = String::new();
        std::fs::File::open(&reopened)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read the copy");
        assert_eq!(text, "the helper's bytes");
        for append in [false, true] {
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .append(append)
                .open(&reopened);
            let wrote = opened.and_then(|mut f| f.write_all(b"X"));
            assert!(wrote.is_err(), "append {append}: a write went through");
        }
        let seals = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GET_SEALS).expect("seals");
        assert_eq!(seals & 0xf, 0xf, "seal, shrink, grow and write: {seals:#x}");
        // The file itself may change afterwards: the copy does not.
        std::fs::write(&path, b"rewritten").expect("rewrite");
        let mut again = String::new();
        std::fs::File::open(&reopened)
            .and_then(|mut f| f.read_to_string(&mut again))
            .expect("read the copy");
        assert_eq!(again, "the helper's bytes");
    }

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
