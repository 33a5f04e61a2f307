//! The exec helper: the prober's own binary re-executed with a hidden first argument
//! ([`HELPER_ARG`]), single-threaded, doing what `runc exec` does between the runtime shim and
//! the command (runc 1.1: `nsexec.c`, `setns_init_linux.go`, `init_linux.go`), in runc's order.
//!
//! Three processes, like runc's stages:
//!
//! 1. the helper (in the prober's namespaces) reads the [`Plan`] from its control socket
//!    (fd 0), opens the container init's namespaces and checks it is still the same process,
//!    moves itself into the container's cgroups, sets the shim's rlimits, `oom_score_adj` and
//!    umask, joins the namespaces (`setns`: ipc, uts, net, pid, mnt, cgroup, time — the user
//!    namespace is never joined: the prober refuses containers that have one), then forks;
//! 2. the reaper, the first process inside the container's PID namespace, is a child
//!    subreaper: the command's orphans come to it instead of the container's init, so a probe
//!    that forks a background child leaves no zombie behind. It reports the command's exit and,
//!    when the prober sends `SIGTERM` (timeout, or the probe is over), kills what is left of the
//!    command's process tree and exits once it has reaped everything;
//! 3. the command's process, cloned sharing the reaper's memory until its `execve` (as
//!    `posix_spawn` and runc's Go runtime start processes: no page tables copied, no
//!    copy-on-write faults): its own session (runc's `setsid`), `/dev/null` on stdin, the
//!    session keyring `_ses.<id>`, no_new_privs, seccomp, bounding set, user and groups, cwd,
//!    capabilities, AppArmor, then `execve` with the spec's environment.
//!
//! Errors before `execve` are reported on the control socket (`failed …`); every descriptor but
//! stdin, stdout and stderr is close-on-exec, so nothing of the prober reaches the container.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use caps::{CapSet, CapsHashSet};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid};

use super::plan::{CapSets, Plan, Report};
use super::sys;

/// The hidden first argument that turns `podward-prober` into the exec helper.
pub const HELPER_ARG: &str = "__podward-exec-init";

/// `CLONE_NEWTIME` (nix has no constant for it).
const CLONE_NEWTIME: i32 = 0x80;

/// Namespaces joined, in runc's order (time last: it, like pid, applies to children).
const NAMESPACES: [(&str, &str, i32); 7] = [
    ("ipc", "ipc", libc::CLONE_NEWIPC),
    ("uts", "uts", libc::CLONE_NEWUTS),
    ("net", "net", libc::CLONE_NEWNET),
    ("pid", "pid_for_children", libc::CLONE_NEWPID),
    ("mnt", "mnt", libc::CLONE_NEWNS),
    ("cgroup", "cgroup", libc::CLONE_NEWCGROUP),
    ("time", "time_for_children", CLONE_NEWTIME),
];

type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Runs the helper; never returns.
pub fn main() -> ! {
    let control = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "podward exec helper: control socket: {e}"
            );
            std::process::exit(125);
        }
    };
    match helper(&control) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let _ = (&control).write_all(Report::Failed(e).line().as_bytes());
            std::process::exit(125);
        }
    }
}

/// Stage 1; returns the exit code for the helper.
fn helper(control: &UnixStream) -> Res<i32> {
    // Everything that does not depend on the plan comes first: a standby helper has it done
    // before the probe that takes it sends the plan.
    sys::assert_single_threaded().map_err(err("helper"))?;
    sys::cloexec_from_3().map_err(err("close-on-exec"))?;
    let own: Vec<Option<(u64, u64)>> = NAMESPACES
        .iter()
        .map(|(_, own, _)| {
            let m = std::fs::metadata(format!("/proc/self/ns/{own}")).ok()?;
            Some((m.dev(), m.ino()))
        })
        .collect();
    let devnull = File::open("/dev/null").map_err(err("open /dev/null"))?;
    let signals = sys::Dispositions::of_self();
    let mut buf = Vec::new();
    (&*control)
        .read_to_end(&mut buf)
        .map_err(err("reading the plan"))?;
    if buf.is_empty() {
        // A standby helper no probe took: the prober closed the socket (it exited or dropped
        // the runner). Nothing was started.
        return Ok(0);
    }
    let plan: Plan = serde_json::from_slice(&buf).map_err(err("decoding the plan"))?;
    let proc_dir = format!("/proc/{}", plan.init_pid);
    check_init(&plan)?;
    let mut joins = Vec::new();
    for ((name, own, flag), mine) in NAMESPACES.into_iter().zip(own) {
        let target = match File::open(format!("{proc_dir}/ns/{name}")) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name == "time" => continue,
            Err(e) => return Err(format!("open {proc_dir}/ns/{name}: {e}")),
        };
        let t = target
            .metadata()
            .map_err(err(format!("stat {name} namespace")))?;
        let mine = mine.ok_or_else(|| format!("stat own {own} namespace: not found"))?;
        if (t.dev(), t.ino()) != mine {
            joins.push((name, OwnedFd::from(target), flag));
        }
    }
    // The namespaces are open: a PID reused since the check would show another start time.
    check_init(&plan)?;
    let pid = std::process::id().to_string();
    for procs in &plan.cgroup_procs {
        std::fs::OpenOptions::new()
            .write(true)
            .open(procs)
            .and_then(|mut f| f.write_all(pid.as_bytes()))
            .map_err(err(format!("join cgroup {}", procs.display())))?;
    }
    for r in &plan.rlimits {
        set_rlimit(r.resource, r.soft, r.hard)?;
    }
    std::fs::write("/proc/self/oom_score_adj", plan.oom_score_adj.to_string())
        .map_err(err("write /proc/self/oom_score_adj"))?;
    nix::sys::stat::umask(Mode::from_bits_truncate(plan.umask));
    for (name, fd, flag) in &joins {
        nix::sched::setns(fd, CloneFlags::from_bits_retain(*flag))
            .map_err(err(format!("setns {name}")))?;
    }
    drop(joins);
    match sys::fork().map_err(err("fork"))? {
        ForkResult::Child => {
            let code = match reaper(control, &plan, devnull, signals) {
                Ok(c) => c,
                Err(e) => {
                    let _ = (&*control).write_all(Report::Failed(e).line().as_bytes());
                    125
                }
            };
            std::process::exit(code)
        }
        ForkResult::Parent { child } => {
            // Only the reaper and the command keep the probe's pipes and the control socket.
            release_stdio(&devnull)?;
            (&*control)
                .write_all(Report::Reaper(child.as_raw()).line().as_bytes())
                .map_err(err("report"))?;
            // No shutdown(2) here: the socket is shared with the reaper, which reports on it.
            loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, c)) => return Ok(c),
                    Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => {
                        // Nobody but the kernel sends the reaper SIGKILL (the prober ends it
                        // with SIGTERM): the container's init exited and the PID namespace's
                        // teardown killed the reaper and the command. runc reports that exec as
                        // killed by SIGKILL (exit 137); say so, unless the reaper reported the
                        // command's exit first (the prober keeps the first report).
                        let _ = (&*control).write_all(
                            Report::Exited(128 + Signal::SIGKILL as i32)
                                .line()
                                .as_bytes(),
                        );
                        return Ok(128 + Signal::SIGKILL as i32);
                    }
                    Ok(WaitStatus::Signaled(_, s, _)) => return Ok(128 + s as i32),
                    Ok(_) => continue,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(format!("wait for the reaper: {e}")),
                }
            }
        }
    }
}

/// The init process is still the one the plan was made for.
fn check_init(plan: &Plan) -> Res<()> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", plan.init_pid))
        .map_err(|_| "the container's init process is gone".to_owned())?;
    match start_time(&stat) {
        Some(t) if t == plan.init_start_time => Ok(()),
        _ => Err("the container's init process is gone (its PID was reused)".to_owned()),
    }
}

/// Field 22 of `/proc/<pid>/stat` (after the parenthesised command, which may hold spaces).
pub fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Field 4 of `/proc/<pid>/stat`: the parent's PID.
pub fn parent_pid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

fn set_rlimit(resource: u32, soft: u64, hard: u64) -> Res<()> {
    use nix::sys::resource::Resource as R;
    let r = match resource {
        0 => R::RLIMIT_CPU,
        1 => R::RLIMIT_FSIZE,
        2 => R::RLIMIT_DATA,
        3 => R::RLIMIT_STACK,
        4 => R::RLIMIT_CORE,
        5 => R::RLIMIT_RSS,
        6 => R::RLIMIT_NPROC,
        7 => R::RLIMIT_NOFILE,
        8 => R::RLIMIT_MEMLOCK,
        9 => R::RLIMIT_AS,
        10 => R::RLIMIT_LOCKS,
        11 => R::RLIMIT_SIGPENDING,
        12 => R::RLIMIT_MSGQUEUE,
        13 => R::RLIMIT_NICE,
        14 => R::RLIMIT_RTPRIO,
        15 => R::RLIMIT_RTTIME,
        n => return Err(format!("unknown rlimit {n}")),
    };
    nix::sys::resource::setrlimit(r, soft, hard).map_err(err(format!("setrlimit {r:?}")))
}

/// Points stdout and stderr at `/dev/null`, so this process does not hold the probe's pipes.
fn release_stdio(devnull: &File) -> Res<()> {
    nix::unistd::dup2_stdout(devnull).map_err(err("dup2 stdout"))?;
    nix::unistd::dup2_stderr(devnull).map_err(err("dup2 stderr"))
}

/// Stage 2, inside the container's PID namespace.
fn reaper(
    control: &UnixStream,
    plan: &Plan,
    devnull: File,
    signals: sys::Dispositions,
) -> Res<i32> {
    nix::sys::prctl::set_child_subreaper(true).map_err(err("set child subreaper"))?;
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    waited.add(Signal::SIGTERM);
    waited.thread_block().map_err(err("block signals"))?;
    let command = sys::spawn_shared(&mut || {
        let e = command(plan, &devnull, signals).err().unwrap_or_default();
        let _ = (&*control).write_all(Report::Failed(e).line().as_bytes());
        127
    })
    .map_err(err("clone"))?;
    release_stdio(&devnull)?;
    drop(devnull);
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

/// Stage 3: the command's process, from fork to `execve` (runc's `linuxSetnsInit.Init`).
fn command(
    plan: &Plan,
    devnull: &File,
    signals: sys::Dispositions,
) -> Res<std::convert::Infallible> {
    SigSet::empty()
        .thread_set_mask()
        .map_err(err("signal mask"))?;
    signals.reset();
    nix::unistd::setsid().map_err(err("setsid"))?;
    nix::unistd::dup2_stdin(devnull).map_err(err("dup2 stdin"))?;
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

/// runc's `setupUser` for a numeric `uid:gid` (what containerd always passes).
fn setup_user(plan: &Plan, env: &mut Vec<String>) -> Res<()> {
    let home = passwd_home(plan.uid).unwrap_or_else(|| "/".to_owned());
    fix_stdio(plan.uid)?;
    let groups: Vec<Gid> = plan.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    let setgroups = std::fs::read_to_string("/proc/self/setgroups").unwrap_or_default();
    if setgroups.trim() != "deny" {
        nix::unistd::setgroups(&groups).map_err(err("setgroups"))?;
    }
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

/// The home directory of the first `/etc/passwd` entry (in the container) with `uid`.
fn passwd_home(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
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

/// runc's `apparmor.ApplyProfile`: the profile takes effect at `execve`.
fn apparmor_on_exec(profile: &str) -> Res<()> {
    let data = format!("exec {profile}");
    let write = |p: &str| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)?
            .write_all(data.as_bytes())
    };
    write("/proc/thread-self/attr/apparmor/exec")
        .or_else(|_| write("/proc/thread-self/attr/exec"))
        .map_err(err(format!("apply apparmor profile {profile:?}")))
}

/// Go's `exec.LookPath` with the process's own `PATH`, as runc resolves the command.
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
