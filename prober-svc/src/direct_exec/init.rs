//! The exec helper: the prober's own binary — run from a sealed in-memory copy, never from a
//! host file — re-executed with a hidden first argument ([`HELPER_ARG`]), single-threaded, doing
//! what `runc exec` does between the runtime shim and the command (runc 1.1: `nsexec.c`,
//! `setns_init_linux.go`, `init_linux.go`), in runc's order.
//!
//! The container is root, hostile, and sees every process of its PID namespace; so no process
//! of the path is ever dumpable (`PR_SET_DUMPABLE 0` from the helper's first instruction until
//! the command's `execve`: no `/proc/<pid>/mem`, `maps`, `exe` or `fd` for the container), none
//! shares memory with another (plain `fork`, never `CLONE_VM`), and none reads a file the
//! container controls without bounds. `docs/prober.md`, "Direct exec: threat model", has the
//! argument.
//!
//! Four processes, like runc's stages:
//!
//! 1. the helper, in the prober's namespaces and cgroups from start to end (the container never
//!    sees it), reads the [`Plan`] from its control socket (fd 0), binds the container's init
//!    to one process (a pidfd and its start time), opens the init's namespaces and refuses the
//!    probe if any of them is not the one the plan recorded (or the init is no longer in the
//!    prober's user namespace), refuses a paused container as `runc exec` does, sets the shim's
//!    rlimits, `oom_score_adj` and umask, becomes a child subreaper, and forks
//!    ([`supervise`]);
//! 2. the intermediate process, in the host's PID namespace, joins the container's cgroups and
//!    then every namespace of the container, forks the reaper into them and exits
//!    ([`stage`]): the reaper comes to the helper, which supervises it — on `SIGTERM` (the
//!    probe is over) it tells the reaper, and kills the whole tree itself if the reaper does
//!    not finish in time (the container can stop or kill the reaper);
//! 3. the reaper, born in every namespace and cgroup of the container, is the probe's first
//!    process there, a child subreaper: the command's orphans come to it, so a probe that forks
//!    a background child leaves no zombie behind. Once it has forked the command it drops to
//!    the plan's credentials with nothing but `CAP_KILL`, no_new_privs and a seccomp filter
//!    ([`privileges`]); it reports the command's exit and, on `SIGTERM`, kills what is left of
//!    the command's process tree and exits once it has reaped everything ([`reaper`]);
//! 4. the command's process, forked from the reaper, sets up the process as runc does and
//!    `execve`s the command ([`command`]): the one privileged window left in the container is
//!    its own, up to its `execve`, as in runc.
//!
//! Errors before `execve` are reported on the control socket (`failed …`, or `refused …` when
//! what the plan was made for no longer holds); every descriptor but stdin, stdout, stderr and
//! the control socket is closed in the container, so nothing of the prober reaches it.

mod command;
mod container_file;
mod descriptors;
mod failure;
mod namespaces;
mod privileges;
mod reaper;
mod stage;
mod start;
mod stat;
mod supervise;
mod zygote;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::Mode;
use nix::unistd::ForkResult;

use self::descriptors::release_stdio;
use self::failure::{Res, err, exit_with};
pub(crate) use self::namespaces::NAMESPACE_NAMES;
use self::namespaces::{Join, NAMESPACES, ns_id};
use self::start::Start;
pub use self::stat::{parent_pid, start_time};
pub use self::zygote::ZYGOTE_ARG;
pub use super::plan::HELPER_ARG;
use super::plan::{Plan, Report};
use super::sys;

/// Bytes reserved for reading a plan: more than a usual plan's few KiB (a larger one still
/// reads whole, in more calls).
const PLAN_CAPACITY: usize = 16 << 10;

/// Why the helper stopped before the command ran.
enum Stop {
    /// Something failed.
    Failed(String),
    /// What the plan was made for no longer holds: the container must not be entered.
    Refused(String),
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Failed(e)
    }
}

/// Runs the helper (or, with [`ZYGOTE_ARG`] after [`HELPER_ARG`], the zygote that forks one per
/// probe); never returns.
pub fn main() -> ! {
    // Already non-dumpable when the C library ran the start-up hook (`sys`); again here for a C
    // library that does not pass it the arguments. The reference keeps the hook linked in.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    std::hint::black_box(&sys::NON_DUMPABLE_AT_START);
    let _ = nix::sys::prctl::set_dumpable(false);
    // The zygote serves forks; it returns only in a child, which goes on as a helper with what
    // the zygote learnt.
    let known =
        (std::env::args_os().nth(2).as_deref() == Some(ZYGOTE_ARG.as_ref())).then(zygote::serve);
    run(known)
}

/// The helper proper, on its control socket (stdin) and the probe's pipes (stdout, stderr):
/// where a helper started for one probe begins (`known`: `None`), and where a child of the
/// zygote goes on (with what the zygote learnt).
fn run(known: Option<Start>) -> ! {
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
    match helper(&control, known) {
        Ok(code) => std::process::exit(code),
        Err(stop) => {
            let report = match stop {
                Stop::Failed(e) => Report::Failed(e),
                Stop::Refused(r) => Report::Refused(r),
            };
            let _ = (&control).write_all(report.line().as_bytes());
            std::process::exit(125);
        }
    }
}

/// Stage 1; returns the exit code for the helper.
fn helper(control: &UnixStream, known: Option<Start>) -> Result<i32, Stop> {
    nix::sys::prctl::set_dumpable(false).map_err(err("set non-dumpable"))?;
    // Everything that does not depend on the plan comes first: a standby helper has it done
    // before the probe that takes it sends the plan.
    let Start {
        own,
        own_user,
        signals,
        reaper_filter,
    } = match known {
        Some(start) => start,
        None => Start::learn()?,
    };
    sys::cloexec_from_3().map_err(err("close-on-exec"))?;
    // Close-on-exec, as every descriptor of the helper but stdio.
    let devnull = File::open("/dev/null").map_err(err("open /dev/null"))?;
    // One read for any usual plan (a few KiB), not a doubling series of small ones.
    let mut buf = Vec::with_capacity(PLAN_CAPACITY);
    (&*control)
        .read_to_end(&mut buf)
        .map_err(err("reading the plan"))?;
    if buf.is_empty() {
        // A standby helper no probe took: the prober closed the socket (it exited or dropped
        // the runner). Nothing was started.
        return Ok(0);
    }
    let plan: Plan = serde_json::from_slice(&buf).map_err(err("decoding the plan"))?;
    let joins = open_init(&plan, own, own_user)?;
    check_not_paused(&plan)?;
    settle(&plan)?;
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    waited.add(Signal::SIGTERM);
    waited.thread_block().map_err(err("block signals"))?;
    // The reaper's parent, the intermediate process, exits once it has forked it: the reaper
    // then comes to the helper.
    nix::sys::prctl::set_child_subreaper(true).map_err(err("set child subreaper"))?;
    let (go_reader, go) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(err("pipe"))?;
    let (reaper_pid, pid_writer) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(err("pipe"))?;
    let (command, command_link) = UnixStream::pair().map_err(err("socketpair"))?;
    match sys::fork().map_err(err("fork"))? {
        ForkResult::Child => {
            drop((go, reaper_pid, command));
            let hand_on = reaper::ForReaper {
                devnull,
                signals,
                filter: &reaper_filter,
                parent: go_reader,
                command_link,
            };
            exit_with(
                control,
                stage::run(control, &plan, joins, pid_writer, hand_on),
            )
        }
        ForkResult::Parent { child } => {
            drop((joins, go_reader, pid_writer, command_link));
            // Only the reaper and the command keep the probe's pipes and the control socket.
            release_stdio(&devnull)?;
            let stage = supervise::Intermediate {
                pid: child,
                reaper_pid,
                go,
                command,
            };
            Ok(supervise::run(control, stage, &waited)?)
        }
    }
}

/// Binds the container's init to one process (a pidfd and its start time), opens those of its
/// namespaces the helper is not in already, and refuses the probe if the init is no longer in
/// the prober's user namespace (`own` and `own_user`: the helper's own namespaces).
fn open_init(
    plan: &Plan,
    own: Vec<Option<(u64, u64)>>,
    own_user: Option<(u64, u64)>,
) -> Result<Vec<Join>, Stop> {
    let proc_dir = format!("/proc/{}", plan.init_pid);
    // The pidfd names one process for good; its start time says it is the one the plan was
    // made for (a PID reused before the pidfd was opened shows another).
    let init = sys::pidfd_open(plan.init_pid).map_err(|_| gone())?;
    check_init(plan)?;
    let mut joins = Vec::new();
    // The first namespace that is not the one the plan recorded (said after the user namespace,
    // which a change of the others usually comes with).
    let mut changed: Option<&str> = None;
    for ((name, own, flag), mine) in NAMESPACES.into_iter().zip(own) {
        let target = match File::open(format!("{proc_dir}/ns/{name}")) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name == "time" => continue,
            Err(e) => return Err(format!("open {proc_dir}/ns/{name}: {e}").into()),
        };
        let t = target
            .metadata()
            .map_err(err(format!("stat {name} namespace")))?;
        let recorded = plan.namespaces.iter().find(|n| n.name == name);
        if recorded.is_none_or(|n| (n.dev, n.ino) != (t.dev(), t.ino())) {
            changed.get_or_insert(name);
        }
        let mine = mine.ok_or_else(|| format!("stat own {own} namespace: not found"))?;
        if (t.dev(), t.ino()) != mine {
            joins.push(Join {
                name,
                fd: OwnedFd::from(target),
                flag,
            });
        }
    }
    // The user namespace last: a process can never return to a parent user namespace, so if
    // the init is still in the prober's now, it was when each namespace above was opened (and
    // none of them can be owned by a user namespace the container made).
    let user = ns_id(&format!("{proc_dir}/ns/user"));
    // Still alive: the files above were the pidfd's process's.
    sys::pidfd_signal(&init, None).map_err(|_| gone())?;
    if user.is_none() || user != own_user {
        return Err(Stop::Refused(
            "the container's init process is in a user namespace of its own (it entered one \
             after the container started): direct exec refuses to join namespaces the \
             container made"
                .to_owned(),
        ));
    }
    if let Some(name) = changed {
        return Err(Stop::Refused(format!(
            "the container's init process is in another {name} namespace than when direct exec \
             was prepared (it entered one of its own): direct exec refuses to join namespaces \
             the container made"
        )));
    }
    drop(init);
    Ok(joins)
}

/// The process settings every process of the probe inherits from the helper: the shim's
/// rlimits, `oom_score_adj` and umask.
fn settle(plan: &Plan) -> Res<()> {
    for r in &plan.rlimits {
        set_rlimit(r.resource, r.soft, r.hard)?;
    }
    std::fs::write("/proc/self/oom_score_adj", plan.oom_score_adj.to_string())
        .map_err(err("write /proc/self/oom_score_adj"))?;
    nix::sys::stat::umask(Mode::from_bits_truncate(plan.umask));
    Ok(())
}

/// `runc exec` refuses a paused container ("cannot exec in a paused container"): its v1
/// freezer cgroup not `THAWED`, or its v2 cgroup `frozen`. A process placed in a frozen cgroup
/// could not even be killed until the container is thawed.
fn check_not_paused(plan: &Plan) -> Res<()> {
    let paused = |what: &str| format!("cannot exec in a paused container ({what})");
    if let Some(dir) = &plan.cgroups.v1_freezer {
        let state = std::fs::read_to_string(dir.join("freezer.state"))
            .map_err(err(format!("read {}/freezer.state", dir.display())))?;
        if state.trim() != "THAWED" {
            return Err(paused(&format!("freezer.state {}", state.trim())));
        }
    }
    if let Some(dir) = &plan.cgroups.v2_dir {
        match std::fs::read_to_string(dir.join("cgroup.events")) {
            Ok(events) if events.lines().any(|l| l == "frozen 1") => {
                return Err(paused("cgroup.events frozen 1"));
            }
            Ok(_) => {}
            // The root cgroup, or a kernel before cgroup.events: nothing to freeze it by.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("read {}/cgroup.events: {e}", dir.display())),
        }
    }
    Ok(())
}

fn gone() -> String {
    "the container's init process is gone".to_owned()
}

/// The init process is still the one the plan was made for.
fn check_init(plan: &Plan) -> Res<()> {
    // `/proc` files have no size to read ahead by: room for a usual `stat` line up front
    // makes it one read instead of a doubling series.
    let mut stat = String::with_capacity(1024);
    File::open(format!("/proc/{}/stat", plan.init_pid))
        .and_then(|mut f| f.read_to_string(&mut stat))
        .map_err(|_| gone())?;
    match start_time(&stat) {
        Some(t) if t == plan.init_start_time => Ok(()),
        _ => Err("the container's init process is gone (its PID was reused)".to_owned()),
    }
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
