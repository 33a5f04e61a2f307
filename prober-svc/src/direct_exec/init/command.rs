//! Stage 3: the command's process, from `fork` to `execve` (runc's `linuxSetnsInit.Init`): its
//! own session (runc's `setsid`), `/dev/null` on stdin, the session keyring `_ses.<id>`,
//! no_new_privs, seccomp, bounding set, user and groups, cwd (checked to be inside the
//! container's root, as runc does since CVE-2024-21626), capabilities, AppArmor, then `execve`
//! with the spec's environment.
//!
//! It is a copy of the reaper (plain `fork`), not dumpable until its `execve` (inherited, and
//! set again once its credentials are the container's). The one file of the container it
//! reads while it still holds the prober's privileges, `/etc/passwd`, is read as
//! [`container_file`] allows; it writes only to procfs checked to be procfs (AppArmor); the
//! `PATH` walk comes after the credentials are the container's.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use caps::{CapSet, CapsHashSet};
use nix::sys::signal::SigSet;
use nix::unistd::{Gid, Uid};

use super::container_file;
use super::descriptors::close_all_but;
use super::failure::{Res, err};
use crate::direct_exec::plan::{CapSets, Plan};
use crate::direct_exec::sys;

/// Most of `/etc/passwd` read for `HOME` (the rest is ignored).
const PASSWD_LIMIT: usize = 4 << 20;

/// Sets the process up and `execve`s the command; returns only an error.
pub(super) fn run(
    plan: &Plan,
    control: &UnixStream,
    devnull: &File,
    signals: sys::Dispositions,
) -> Res<std::convert::Infallible> {
    SigSet::empty()
        .thread_set_mask()
        .map_err(err("signal mask"))?;
    signals.reset();
    nix::unistd::setsid().map_err(err("setsid"))?;
    nix::unistd::dup2_stdin(devnull).map_err(err("dup2 stdin"))?;
    // `devnull` is stdin now; from here the command holds stdio and the control socket only.
    close_all_but(&[control.as_raw_fd()])?;
    let ring = CString::new(format!("_ses.{}", plan.container_id)).map_err(err("keyring name"))?;
    sys::join_session_keyring(&ring).map_err(err("join session keyring"))?;
    if plan.no_new_privileges {
        nix::sys::prctl::set_no_new_privs().map_err(err("set no_new_privs"))?;
    }
    // Without no_new_privs loading a filter needs CAP_SYS_ADMIN: before the capabilities go.
    if let Some(p) = plan.seccomp.as_ref().filter(|_| !plan.no_new_privileges) {
        sys::load_seccomp(&p.bpf, p.flags).map_err(err("load seccomp"))?;
    }
    let mut env = plan.env.clone();
    finalize(plan, &mut env)?;
    // A change of credentials already made the process non-dumpable (fs.suid_dumpable); a
    // root container's root keeps its uid, so say it again until the execve.
    nix::sys::prctl::set_dumpable(false).map_err(err("set non-dumpable"))?;
    if let Some(profile) = &plan.apparmor_profile {
        apparmor_on_exec(profile)?;
    }
    let path = look_path(&plan.argv, &env)?;
    if let Some(p) = plan.seccomp.as_ref().filter(|_| plan.no_new_privileges) {
        sys::load_seccomp(&p.bpf, p.flags).map_err(err("load seccomp"))?;
    }
    let cstr = |s: &String| CString::new(s.as_bytes()).map_err(err("NUL in argument"));
    let argv: Vec<CString> = plan.argv.iter().map(cstr).collect::<Res<_>>()?;
    let envp: Vec<CString> = env.iter().map(cstr).collect::<Res<_>>()?;
    let path = CString::new(path).map_err(err("NUL in path"))?;
    let e = match nix::unistd::execve(&path, &argv, &envp) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    Err(format!(
        "exec {:?}: {e}",
        plan.argv.first().map(String::as_str).unwrap_or("")
    ))
}

fn set_of(mask: u64) -> CapsHashSet {
    caps::all()
        .into_iter()
        .filter(|c| c.index() < 64 && mask & (1 << c.index()) != 0)
        .collect()
}

/// runc's `finalizeNamespace` and `setupUser`.
fn finalize(plan: &Plan, env: &mut Vec<String>) -> Res<()> {
    // chdir as root first; retry as the user on EACCES (a volume only the user can enter).
    let mut chdir_later = false;
    if !plan.cwd.is_empty() {
        match nix::unistd::chdir(Path::new(&plan.cwd)) {
            Ok(()) => {}
            Err(nix::errno::Errno::EACCES) | Err(nix::errno::Errno::EPERM) => chdir_later = true,
            Err(e) => {
                return Err(format!(
                    "chdir to cwd ({:?}) set in config.json failed: {e}",
                    plan.cwd
                ));
            }
        }
    }
    let CapSets {
        bounding,
        effective,
        permitted,
        inheritable,
        ambient,
    } = plan.caps;
    let keep = set_of(bounding);
    for c in caps::all() {
        if !keep.contains(&c) {
            match caps::drop(None, CapSet::Bounding, c) {
                Ok(()) => {}
                Err(e) if e.to_string().contains("Invalid argument") => {}
                Err(e) => return Err(format!("unable to apply bounding set: {e}")),
            }
        }
    }
    nix::sys::prctl::set_keepcaps(true).map_err(err("set keep caps"))?;
    setup_user(plan, env)?;
    if chdir_later {
        nix::unistd::chdir(Path::new(&plan.cwd)).map_err(err(format!(
            "chdir to cwd ({:?}) set in config.json failed",
            plan.cwd
        )))?;
    }
    check_cwd()?;
    nix::sys::prctl::set_keepcaps(false).map_err(err("clear keep caps"))?;
    caps::set(None, CapSet::Inheritable, &set_of(inheritable))
        .map_err(err("capset inheritable"))?;
    caps::set(None, CapSet::Effective, &set_of(effective)).map_err(err("capset effective"))?;
    caps::set(None, CapSet::Permitted, &set_of(permitted)).map_err(err("capset permitted"))?;
    // runc (gocapability) raises every ambient capability of the spec and lowers every other,
    // failures ignored: the same end state as clearing the set and raising the spec's (a
    // raise fails where runc's would), in one call instead of one per capability.
    let _ = caps::clear(None, CapSet::Ambient);
    for c in set_of(ambient) {
        let _ = caps::raise(None, CapSet::Ambient, c);
    }
    Ok(())
}

/// runc's `verifyCwd` (CVE-2024-21626): the working directory must be inside the container's
/// root — a cwd reached through a descriptor of the host would read as unreachable.
fn check_cwd() -> Res<()> {
    match nix::unistd::getcwd() {
        Err(nix::errno::Errno::ENOENT) => Err(
            "current working directory is outside of container mount namespace root -- \
             possible container breakout detected"
                .to_owned(),
        ),
        Err(e) => Err(format!(
            "failed to verify if current working directory is safe: {e}"
        )),
        Ok(wd) if !wd.is_absolute() => Err(format!(
            "current working directory is not absolute -- possible container breakout \
             detected: cwd is {wd:?}"
        )),
        Ok(_) => Ok(()),
    }
}

/// runc's `setupUser` for a numeric `uid:gid` (what containerd always passes).
fn setup_user(plan: &Plan, env: &mut Vec<String>) -> Res<()> {
    let home = passwd_home(plan.uid).unwrap_or_else(|| "/".to_owned());
    fix_stdio(plan.uid)?;
    let groups: Vec<Gid> = plan.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    // The process is in the prober's user namespace (the helper refuses any other), where
    // `setgroups` is always allowed: nothing the container serves as `/proc` decides it.
    nix::unistd::setgroups(&groups).map_err(err("setgroups"))?;
    nix::unistd::setgid(Gid::from_raw(plan.gid)).map_err(err("setgid"))?;
    nix::unistd::setuid(Uid::from_raw(plan.uid)).map_err(err("setuid"))?;
    let has_home = env
        .iter()
        .any(|e| e.strip_prefix("HOME=").is_some_and(|v| !v.is_empty()));
    if !has_home {
        match env.iter_mut().find(|e| e.starts_with("HOME=")) {
            Some(e) => *e = format!("HOME={home}"),
            None => env.push(format!("HOME={home}")),
        }
    }
    Ok(())
}

/// The home directory of the first `/etc/passwd` entry (in the container) with `uid`. A
/// passwd that is not a regular file (a FIFO that would block, a device) counts as absent.
fn passwd_home(uid: u32) -> Option<String> {
    let bytes = container_file::read("/etc/passwd", PASSWD_LIMIT).ok()??;
    let text = String::from_utf8_lossy(&bytes);
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].trim().parse() == Ok(uid)).then(|| f[5].to_owned())
    })
}

/// runc's `fixStdioPermissions`: stdio (except `/dev/null`) owned by the user, so the command
/// can reopen `/dev/stdout`.
fn fix_stdio(uid: u32) -> Res<()> {
    let null = nix::sys::stat::stat("/dev/null").map_err(err("stat /dev/null"))?;
    let fix = |fd: std::os::fd::BorrowedFd<'_>| -> Res<()> {
        let st = nix::sys::stat::fstat(fd).map_err(err("fstat stdio"))?;
        if st.st_rdev == null.st_rdev {
            return Ok(());
        }
        match nix::unistd::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(st.st_gid))) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::EPERM) => Ok(()),
            Err(e) => Err(format!("fchown stdio: {e}")),
        }
    };
    fix(std::io::stdin().as_fd())?;
    fix(std::io::stderr().as_fd())?;
    fix(std::io::stdout().as_fd())
}

/// runc's `apparmor.ApplyProfile`: the profile takes effect at `execve`. Written only through
/// the real procfs: the container's `/proc` is checked to be procfs (`fstatfs`), the attribute
/// file reached under it without a symbolic link or a mount crossing, and checked again, so
/// that a file or mount the container put there never takes the write (the CVE-2019-16884
/// class).
fn apparmor_on_exec(profile: &str) -> Res<()> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let data = format!("exec {profile}");
    let procfs = |fd: &std::os::fd::OwnedFd| {
        nix::sys::statfs::fstatfs(fd)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
    };
    let proc = nix::fcntl::open(
        "/proc",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(err("open /proc"))?;
    if !procfs(&proc) {
        return Err(format!(
            "apply apparmor profile {profile:?}: /proc is not procfs"
        ));
    }
    let tid = nix::unistd::gettid();
    let write = |attr: &str| -> Res<()> {
        let how = OpenHow::new()
            .flags(OFlag::O_WRONLY | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_XDEV,
            );
        let path = format!("{tid}/task/{tid}/{attr}");
        let fd = nix::fcntl::openat2(&proc, path.as_str(), how).map_err(err(&path))?;
        if !procfs(&fd) {
            return Err(format!("{path} is not on procfs"));
        }
        nix::unistd::write(&fd, data.as_bytes()).map_err(err(&path))?;
        Ok(())
    };
    write("attr/apparmor/exec")
        .or_else(|_| write("attr/exec"))
        .map_err(err(format!("apply apparmor profile {profile:?}")))
}

/// Go's `exec.LookPath` with the process's own `PATH`, as runc resolves the command. Runs with
/// the container's credentials only.
fn look_path(argv: &[String], env: &[String]) -> Res<String> {
    let Some(file) = argv.first() else {
        return Err("exec: no command".to_owned());
    };
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| !m.is_dir() && m.mode() & 0o111 != 0);
    if file.contains('/') {
        return if executable(Path::new(file)) {
            Ok(file.clone())
        } else {
            Err(format!(
                "exec: {file:?}: stat {file}: no such file or directory or not executable"
            ))
        };
    }
    let path = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("");
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = Path::new(dir).join(file);
        if executable(&candidate) {
            return Ok(candidate.to_string_lossy().into_owned());
        }
    }
    Err(format!(
        "exec: {file:?}: executable file not found in $PATH"
    ))
}
