//! Direct exec (`--exec-mode direct`) against CRI `ExecSync` on the real containerd + runc: the
//! same command through both runners, side by side, for containers with different security
//! contexts — identical output, byte for byte — and the same results for timeouts, exits, huge
//! output, background children and a container that exits mid-probe, with nothing left running.

use std::path::PathBuf;
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::{
    ContainerSpec, Driver, Pod, PodSpec, RestartPolicy, SecurityContext, TestNode, bin_path,
    proc_cmdline,
};
use podward_prober::direct_exec::init::{HELPER_ARG, ZYGOTE_ARG};
use podward_prober::direct_exec::{DirectExec, ExecMode};
use podward_prober::handler::exec::cri::CriExec;
use podward_prober::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};

#[path = "support/exec_direct.rs"]
mod support;
use support::{node_and_driver, run};

/// What the issue lists, each a line or block; `2>&1` so errors compare too.
const SCRIPT: &str = r#"
id
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters|SigBlk):' /proc/self/status
echo "SigIgn but glibc's 32 and 33: $(( 0x$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status) & ~0x180000000 ))"
cat /proc/self/cgroup
for n in cgroup ipc mnt net pid pid_for_children time time_for_children user uts; do echo "$n $(readlink /proc/self/ns/$n)"; done
cat /proc/self/attr/current 2>&1; echo "attr=$?"
ulimit -a
pwd
env
umask
cat /proc/self/oom_score_adj
ls -l /proc/self/fd | awk 'NR > 1 {print $9, $10, $11}' | sed 's/pipe:\[[0-9]*\]/pipe/'
unshare -U true 2>&1; echo "unshare=$?"
touch /rw-check 2>&1; echo "rw=$?"; rm -f /rw-check
echo hello > /dev/stdout; echo "stdout=$?"
"#;

struct Runners {
    cri: CriExec,
    direct: DirectExec,
}

impl Runners {
    fn new(node: &TestNode) -> Runners {
        let ch = podward_api::socket::channel(node.containerd_socket());
        Runners {
            cri: CriExec::new(ch.clone()),
            direct: DirectExec::new(ExecMode::Direct, ch, bin_path("podward-prober")),
        }
    }
}

fn text(o: &ExecOutput) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        o.exit_code,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn pod(driver: &Driver, node: &TestNode, name: &str, sec: SecurityContext) -> Pod {
    // Grace 1 s (`sleep` as PID 1 ignores SIGTERM) and no restarts: deleting a pod whose sync
    // loop restarts containers takes 30 s.
    let spec = PodSpec::new(name)
        .grace_period(1)
        .restart_policy(RestartPolicy::Never)
        .container(ContainerSpec::new("app", &["sleep", "3600"]).security(sec));
    driver.run_pod(node, spec).await.expect("run pod")
}

/// The security contexts of the issue, by name.
fn contexts() -> Vec<(&'static str, SecurityContext)> {
    let d = SecurityContext::default;
    vec![
        ("default", d()),
        (
            "user",
            SecurityContext {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                supplemental_groups: vec![4000, 5000],
                ..d()
            },
        ),
        (
            "caps",
            SecurityContext {
                drop_capabilities: vec!["ALL".into()],
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                ..d()
            },
        ),
        (
            "privileged",
            SecurityContext {
                privileged: true,
                ..d()
            },
        ),
        (
            "readonly",
            SecurityContext {
                readonly_rootfs: true,
                ..d()
            },
        ),
        (
            "seccomp",
            SecurityContext {
                seccomp_runtime_default: true,
                ..d()
            },
        ),
        (
            "nnp",
            SecurityContext {
                no_new_privs: true,
                ..d()
            },
        ),
        (
            "memory",
            SecurityContext {
                memory_limit: Some(64 << 20),
                ..d()
            },
        ),
        (
            "everything",
            SecurityContext {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                supplemental_groups: vec![4000],
                drop_capabilities: vec!["ALL".into()],
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                readonly_rootfs: true,
                seccomp_runtime_default: true,
                no_new_privs: true,
                memory_limit: Some(64 << 20),
                ..d()
            },
        ),
    ]
}

#[tokio::test]
async fn identical_output_for_every_security_context() {
    let (node, driver) = node_and_driver().await;
    let runners = Runners::new(&node);
    let mut failures = Vec::new();
    for (name, sec) in contexts() {
        let seccomp = sec.seccomp_runtime_default;
        let p = pod(&driver, &node, name, sec).await;
        let id = p.container_id("app").expect("container id");
        let cmd = ["sh", "-c", SCRIPT];
        let t = Duration::from_secs(10);
        let cri = text(&run(&runners.cri, &id, &cmd, t).await.expect("cri exec"));
        let direct = text(
            &run(&runners.direct, &id, &cmd, t)
                .await
                .expect("direct exec"),
        );
        if cri != direct {
            let diff: Vec<String> = cri
                .lines()
                .zip(direct.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("  CRI:    {a}\n  direct: {b}"))
                .collect();
            failures.push(format!(
                "== {name}: {} lines differ ({} vs {} lines)\n{}\n== {name}: CRI\n{cri}",
                diff.len(),
                cri.lines().count(),
                direct.lines().count(),
                diff.join("\n")
            ));
        }
        // The script ran to its end under the context asked for (so equal is not vacuous), and
        // the syscall the profile denies is denied (equal output: in both modes) where allowed
        // without it.
        assert!(
            direct.contains("stdout=0"),
            "{name}: the script did not finish:\n{direct}"
        );
        let (filter, unshare) = if seccomp {
            ("Seccomp:\t2", "unshare=1")
        } else {
            ("Seccomp:\t0", "unshare=0")
        };
        assert!(
            direct.contains(filter),
            "{name}: expected {filter}:\n{direct}"
        );
        if seccomp || name == "default" {
            assert!(
                direct.contains(unshare),
                "{name}: expected {unshare}:\n{direct}"
            );
        }
        if name == "user" {
            assert!(
                direct.contains("uid=1000 gid=3000"),
                "{name}: ids:\n{direct}"
            );
        }
        p.delete().await.expect("delete pod");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The probe's view of an output (kubelet's `LimitWriter`: stdout then stderr, 10 KiB).
fn probe_view(o: &ExecOutput) -> Vec<u8> {
    const LIMIT: usize = 10 * 1024;
    let mut v = o.stdout.clone();
    v.extend_from_slice(&o.stderr);
    v.truncate(LIMIT);
    v
}

/// One process on the host: PID, parent, state letter, command line (NULs as spaces), its PID
/// and mount namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: i32,
    ppid: i32,
    state: char,
    cmdline: String,
    pid_ns: Option<PathBuf>,
    mnt_ns: Option<PathBuf>,
}

fn procs() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let mut rest = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.split(' '))
            .into_iter()
            .flatten();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let cmdline = proc_cmdline(pid);
        out.push(Proc {
            pid,
            ppid,
            state,
            cmdline,
            pid_ns: std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok(),
            mnt_ns: std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok(),
        });
    }
    out
}

/// The process that runs `init_cmdline` (a container's init).
fn init_of(init_cmdline: &str) -> Proc {
    procs()
        .into_iter()
        .find(|p| p.cmdline == init_cmdline)
        .unwrap_or_else(|| panic!("no process runs {init_cmdline:?}"))
}

/// Every process in the PID namespace of the container whose init runs `init_cmdline`.
fn container_procs(init_cmdline: &str) -> Vec<Proc> {
    let ns = init_of(init_cmdline).pid_ns;
    procs().into_iter().filter(|p| p.pid_ns == ns).collect()
}

/// Host processes whose command line contains `marker`.
fn running(marker: &str) -> Vec<Proc> {
    procs()
        .into_iter()
        .filter(|p| p.cmdline.contains(marker))
        .collect()
}

/// Exec helpers (a probe's helper, its reaper, a command not yet exec'd) inside the mount
/// namespace `mnt_ns` (a container's). A standby helper waits in the prober's namespaces for
/// the next probe, so it is never one of them.
fn helpers_in(mnt_ns: &Option<PathBuf>) -> Vec<Proc> {
    running(HELPER_ARG)
        .into_iter()
        .filter(|p| &p.mnt_ns == mnt_ns)
        .collect()
}

/// Exec helpers started by this test process that have not entered a container: standbys.
fn standby_helpers() -> Vec<Proc> {
    let (me, my_mnt) = (std::process::id() as i32, own_mnt_ns());
    running(HELPER_ARG)
        .into_iter()
        .filter(|p| p.ppid == me && p.mnt_ns == my_mnt)
        .collect()
}

fn own_mnt_ns() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/ns/mnt").ok()
}

/// Asserts nothing runs the helper inside the container any more (the helper's exit may trail
/// the probe's answer by a moment: polled), at most one standby helper waits outside it, and the
/// container holds its init alone, no zombie.
async fn assert_only_init(init_cmdline: &str, after: &str) {
    let mnt = init_of(init_cmdline).mnt_ns;
    eventually(
        &format!("the exec helpers to leave the container after {after}"),
        Duration::from_secs(5),
        async || helpers_in(&mnt).is_empty(),
    )
    .await;
    // The helper that ran the probe never enters the container's mount namespace: until it has
    // exited it looks like a standby, so this is polled too.
    eventually(
        &format!("one standby helper at most after {after}"),
        Duration::from_secs(5),
        async || standby_helpers().len() <= 1,
    )
    .await;
    // The reaper is reaped by its helper, which may still be on its way out when the zombie
    // reaper no longer shows the helper's marker: polled as well.
    let alone = || {
        let procs = container_procs(init_cmdline);
        let ok = procs.len() == 1 && procs[0].cmdline == init_cmdline && procs[0].state != 'Z';
        (ok, procs)
    };
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while !alone().0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "after {after}: the container must hold its init alone, no zombie: {:?}",
        alone().1
    );
}

async fn init_pod(driver: &Driver, node: &TestNode, name: &str, init: &[&str]) -> Pod {
    let spec = PodSpec::new(name)
        .grace_period(1)
        .restart_policy(RestartPolicy::Never)
        .container(ContainerSpec::new("app", init));
    driver.run_pod(node, spec).await.expect("run pod")
}

#[tokio::test]
async fn same_results_at_the_edges_and_nothing_left() {
    let (node, driver) = node_and_driver().await;
    let r = Runners::new(&node);
    let init = "sleep 3601";
    let p = init_pod(&driver, &node, "edges", &["sleep", "3601"]).await;
    let id = p.container_id("app").expect("container id");
    let t = Duration::from_secs(10);

    // A non-zero exit, with output on both streams.
    let cmd = ["sh", "-c", "echo out; echo err >&2; exit 3"];
    let d = run(&r.direct, &id, &cmd, t).await.expect("direct exec");
    assert_only_init(init, "a non-zero exit").await;
    let c = run(&r.cri, &id, &cmd, t).await.expect("cri exec");
    assert_eq!(text(&d), text(&c));
    assert_eq!(d.exit_code, 3);

    // A command that is not there: an error from both (not an exit code), with runc's words,
    // and nothing left (direct exec's command process fails before its execve).
    let cmd = ["no-such-command-2051"];
    let d = run(&r.direct, &id, &cmd, t).await;
    assert_only_init(init, "a missing command").await;
    let c = run(&r.cri, &id, &cmd, t).await;
    for (way, res) in [("direct", &d), ("cri", &c)] {
        match res {
            Err(ExecError::Runtime { message, .. }) => assert!(
                message.contains("executable file not found in $PATH"),
                "{way}: {message}"
            ),
            other => panic!("{way}: expected a runtime error, got {other:?}"),
        }
    }

    // Huge output (4 MiB, under CRI's 16 MiB message limit): the same probe output and exit.
    let cmd = [
        "sh",
        "-c",
        "head -c 4194304 /dev/zero | tr '\\0' x; echo done >&2",
    ];
    let d = run(&r.direct, &id, &cmd, t).await.expect("direct exec");
    assert_only_init(init, "huge output").await;
    let c = run(&r.cri, &id, &cmd, t).await.expect("cri exec");
    assert_eq!((d.exit_code, probe_view(&d)), (c.exit_code, probe_view(&c)));
    assert!(d.stdout.len() >= 10 * 1024 && d.stdout.iter().all(|b| *b == b'x'));

    // A timeout: both report it, and the command is gone afterwards.
    let short = Duration::from_secs(2);
    let d = run(&r.direct, &id, &["sleep", "2031"], short).await;
    assert!(matches!(d, Err(ExecError::Timeout { .. })), "direct: {d:?}");
    assert_only_init(init, "a timeout").await;
    let c = run(&r.cri, &id, &["sleep", "2032"], short).await;
    assert!(matches!(c, Err(ExecError::Timeout { .. })), "cri: {c:?}");
    eventually(
        "CRI's timed-out command to be killed",
        Duration::from_secs(10),
        async || running("sleep 2032").is_empty(),
    )
    .await;

    // A background child holding the pipes: the exit code and output of the command in both
    // (containerd waits for the pipes, so its answer comes when the child exits); direct mode
    // leaves nothing behind.
    let cmd = ["sh", "-c", "sleep 4 & echo started; exit 0"];
    let short = Duration::from_secs(2);
    let d = run(&r.direct, &id, &cmd, short).await.expect("direct exec");
    assert_only_init(init, "a background child").await;
    let c = run(&r.cri, &id, &cmd, short).await.expect("cri exec");
    assert_eq!(text(&d), text(&c));
    assert_eq!(d.exit_code, 0);
    p.delete().await.expect("delete pod");

    // The container exits during the probe: the same answer from both, and nothing left.
    let mut answers = Vec::new();
    for (name, runner) in [("direct", &r.direct as &dyn ExecRunner), ("cri", &r.cri)] {
        let p = init_pod(
            &driver,
            &node,
            &format!("exits-{name}"),
            &["sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 0.1; done"],
        )
        .await;
        let id = p.container_id("app").expect("container id");
        let mnt = init_of("sh -c while [ ! -e /tmp/stop ]; do sleep 0.1; done").mnt_ns;
        let cmd = ["sh", "-c", "touch /tmp/stop; sleep 2041; echo never"];
        let a = run(runner, &id, &cmd, Duration::from_secs(20)).await;
        assert!(
            running("sleep 2041").is_empty(),
            "{name}: the probe command outlived its container"
        );
        eventually(
            &format!("{name}: the exec helpers to leave the exited container"),
            Duration::from_secs(5),
            async || helpers_in(&mnt).is_empty(),
        )
        .await;
        answers.push(match a {
            Ok(o) => format!(
                "exit {}: {}",
                o.exit_code,
                String::from_utf8_lossy(&probe_view(&o))
            ),
            Err(ExecError::Timeout { .. }) => "timeout".to_owned(),
            Err(e) => format!("error: {e}"),
        });
        p.delete().await.expect("delete pod");
    }
    assert_eq!(
        answers[0], answers[1],
        "direct vs CRI when the container exits mid-probe"
    );
}

#[tokio::test]
async fn a_standby_helper_waits_outside_containers_and_goes_with_its_runner() {
    let (node, driver) = node_and_driver().await;
    let init = "sleep 3602";
    let p = init_pod(&driver, &node, "standby", &["sleep", "3602"]).await;
    let id = p.container_id("app").expect("container id");
    let t = Duration::from_secs(10);
    let ch = podward_api::socket::channel(node.containerd_socket());
    let direct = DirectExec::new(ExecMode::Direct, ch.clone(), bin_path("podward-prober"));
    assert!(
        standby_helpers().is_empty(),
        "no helper before the first direct probe"
    );

    let o = run(&direct, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0);
    assert_only_init(init, "the first probe").await;
    eventually(
        "the first probe to leave a standby helper",
        Duration::from_secs(5),
        async || standby_helpers().len() == 1,
    )
    .await;
    let first = standby_helpers().remove(0);
    let cgroup = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok();
    assert_eq!(
        cgroup(&first.pid.to_string()),
        cgroup("self"),
        "a standby stays in the prober's cgroups"
    );

    assert!(
        first.cmdline.contains(ZYGOTE_ARG),
        "the standby is the zygote: {first:?}"
    );

    // The next probe's helper is forked by the standby, which stays: the same process, and
    // no other started.
    let probe = run(&direct, &id, &["sh", "-c", "sleep 0.3; exit 4"], t);
    let forked = eventually(
        "the probe's helper, forked by the standby",
        Duration::from_secs(5),
        async || running(HELPER_ARG).iter().any(|p| p.ppid == first.pid),
    );
    let (o, ()) = tokio::join!(probe, forked);
    assert_eq!(o.expect("direct exec").exit_code, 4);
    assert_only_init(init, "the second probe").await;
    assert_eq!(
        standby_helpers(),
        vec![first.clone()],
        "the same standby after the second probe"
    );

    // A standby that died meanwhile is replaced by another, started for the next probe.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the standby");
    eventually(
        "the killed standby to be dead (a zombie until the runner notices)",
        Duration::from_secs(5),
        async || !procs().iter().any(|p| p.pid == first.pid && p.state != 'Z'),
    )
    .await;
    let o = run(&direct, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0);
    assert_only_init(init, "a probe after the standby was killed").await;
    eventually(
        "a new standby in place of the one killed",
        Duration::from_secs(5),
        async || matches!(&standby_helpers()[..], [s] if s.pid != first.pid),
    )
    .await;

    drop(direct);
    eventually(
        "the standby to go with its runner",
        Duration::from_secs(5),
        async || standby_helpers().is_empty(),
    )
    .await;

    // Without a standby, nothing waits between probes.
    let cold = DirectExec::with_standby(ExecMode::Direct, ch, bin_path("podward-prober"), false);
    let o = run(&cold, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0);
    assert_only_init(init, "a probe without standby").await;
    assert!(standby_helpers().is_empty(), "{:?}", standby_helpers());
    p.delete().await.expect("delete pod");
}

/// A probe dropped while its helper is still being forked (the zygote stopped, so the fork
/// comes late) leaves nothing behind: once the helper runs, it is ended, and the command with it.
#[tokio::test]
async fn a_probe_dropped_before_its_helper_was_forked_leaves_nothing_behind() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let (node, driver) = node_and_driver().await;
    let init = "sleep 3603";
    let p = init_pod(&driver, &node, "dropped", &["sleep", "3603"]).await;
    let id = p.container_id("app").expect("container id");
    let t = Duration::from_secs(30);
    let ch = podward_api::socket::channel(node.containerd_socket());
    let direct = DirectExec::new(ExecMode::Direct, ch, bin_path("podward-prober"));
    let o = run(&direct, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0);
    let zygote = standby_helpers().remove(0);
    kill(Pid::from_raw(zygote.pid), Signal::SIGSTOP).expect("stop the zygote");
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        run(&direct, &id, &["sleep", "3604"], t),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the probe cannot end while the zygote is stopped"
    );
    kill(Pid::from_raw(zygote.pid), Signal::SIGCONT).expect("continue the zygote");
    // The zygote serves its requests in order: once the next probe is answered, the dropped
    // probe's helper has been forked.
    let o = run(&direct, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0);
    assert_only_init(init, "a probe dropped before its helper was forked").await;
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// A standby whose prober went away (its control socket closed, no plan) exits 0 and says
/// nothing: a prober restart leaves no error behind.
#[test]
fn a_standby_helper_whose_prober_is_gone_exits_quietly() {
    use std::process::{Command, Stdio};
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let child = Command::new(bin_path("podward-prober"))
        .arg(HELPER_ARG)
        .env_clear()
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the helper");
    drop(ours);
    let out = child.wait_with_output().expect("helper output");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

/// The same for the zygote: the end of its socket, no request, and it exits 0 without a word.
#[test]
fn a_standby_zygote_whose_prober_is_gone_exits_quietly() {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use std::process::{Command, Stdio};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair");
    let child = Command::new(bin_path("podward-prober"))
        .args([HELPER_ARG, ZYGOTE_ARG])
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the zygote");
    drop(ours);
    let out = child.wait_with_output().expect("zygote output");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

/// The zygote's protocol: a message that does not carry three descriptors is dropped and the
/// zygote goes on; a request gets a helper whose first word on the control socket is one byte
/// carrying its own pidfd; that helper, given no plan, exits 0 without a word, as a started one.
#[test]
fn the_zygote_drops_malformed_requests_and_forks_a_helper_that_sends_its_pidfd() {
    use nix::sys::socket::{
        AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
        sendmsg, socketpair,
    };
    use std::io::{IoSlice, IoSliceMut, Read};
    use std::os::fd::{AsRawFd, RawFd};
    use std::process::{Command, Stdio};
    let (requests, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair");
    let mut zygote = Command::new(bin_path("podward-prober"))
        .args([HELPER_ARG, ZYGOTE_ARG])
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the zygote");
    let send = |fds: &[RawFd]| {
        let cmsgs = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsgs };
        sendmsg::<()>(
            requests.as_raw_fd(),
            &[IoSlice::new(b"f")],
            cmsgs,
            MsgFlags::empty(),
            None,
        )
        .expect("send a request");
    };
    let (stray_read, stray_write) = nix::unistd::pipe().expect("pipe");
    send(&[]);
    send(&[stray_write.as_raw_fd()]);
    drop(stray_write);
    // The zygote closed the stray descriptor it was sent: the pipe reads its end.
    let mut stray = std::fs::File::from(stray_read);
    let mut nothing = Vec::new();
    stray
        .read_to_end(&mut nothing)
        .expect("the stray pipe's end");
    assert!(nothing.is_empty());

    let (control, control_theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let (out_read, out_write) = nix::unistd::pipe().expect("pipe");
    let (err_read, err_write) = nix::unistd::pipe().expect("pipe");
    send(&[
        control_theirs.as_raw_fd(),
        out_write.as_raw_fd(),
        err_write.as_raw_fd(),
    ]);
    drop((control_theirs, out_write, err_write));
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        control.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .expect("the helper's first word");
    let fds: Vec<RawFd> = msg
        .cmsgs()
        .expect("cmsgs")
        .flat_map(|c| match c {
            ControlMessageOwned::ScmRights(fds) => fds,
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        (msg.bytes, fds.len()),
        (1, 1),
        "one byte carrying one descriptor"
    );
    assert_eq!(iov[0][0], b'p');
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fds[0])).expect("fd");
    assert_eq!(link.to_string_lossy(), "anon_inode:[pidfd]");

    // No plan: the helper exits, and with it its pipes close, without a word.
    drop(control);
    let (mut out, mut err) = (std::fs::File::from(out_read), std::fs::File::from(err_read));
    let (mut o, mut e) = (Vec::new(), Vec::new());
    out.read_to_end(&mut o).expect("stdout");
    err.read_to_end(&mut e).expect("stderr");
    assert!(o.is_empty() && e.is_empty(), "{o:?} {e:?}");

    drop(requests);
    let status = zygote.wait().expect("the zygote's exit");
    assert_eq!(status.code(), Some(0));
}

/// The command and the reaper above it are in the container init's v2 cgroup (the `0::` line:
/// on a hybrid node the `unified` hierarchy), where the helper forks the reaper straight into it
/// (`clone3` with `CLONE_INTO_CGROUP`) or, on a kernel without it, joins by writing
/// `cgroup.procs`. Left where the helper is, they would show the prober's cgroup instead.
#[tokio::test]
async fn the_probe_runs_in_the_containers_v2_cgroup() {
    let (node, driver) = node_and_driver().await;
    let runners = Runners::new(&node);
    let p = pod(&driver, &node, "v2cgroup", SecurityContext::default()).await;
    let id = p.container_id("app").expect("container id");
    // The command's, the init's, then the reaper's (the command's parent) `0::` line.
    let cmd = [
        "sh",
        "-c",
        "grep '^0::' /proc/self/cgroup; grep '^0::' /proc/1/cgroup; grep '^0::' /proc/$PPID/cgroup",
    ];
    let t = Duration::from_secs(10);
    let o = run(&runners.direct, &id, &cmd, t)
        .await
        .expect("direct exec");
    let out = text(&o);
    assert_eq!(o.exit_code, 0, "{out}");
    let lines: Vec<&str> = std::str::from_utf8(&o.stdout)
        .expect("utf-8")
        .lines()
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    let (command, init, reaper) = (lines[0], lines[1], lines[2]);
    assert!(init.starts_with("0::/"), "the init's v2 cgroup: {out}");
    assert_eq!(command, init, "the command in the init's v2 cgroup");
    assert_eq!(reaper, init, "the reaper in the init's v2 cgroup");
    // runc's own placement (CRI; its command's parent is outside the container) is the same.
    let cri = run(&runners.cri, &id, &["grep", "^0::", "/proc/self/cgroup"], t)
        .await
        .expect("cri exec");
    assert_eq!(
        String::from_utf8_lossy(&cri.stdout).trim_end(),
        command,
        "CRI's command in the same v2 cgroup"
    );
}
