//! Direct exec attacked from inside the container through what it can see of the probe's
//! processes, on the real containerd + runc, with a static attacker (`exec_direct_staging/
//! attack.c`, built here with `gcc -static`) run as the container's command from `/out`:
//!
//! - every process of the probe path it sees, stopped and compared with itself: its mount table
//!   and network interfaces (files the kernel does not ptrace-check) must be the container's;
//! - with `SYS_PTRACE`, the reaper made to call `mount(2)`: it holds nothing to do it with;
//! - the probe command stopped before its `execve` (or, with `SYS_PTRACE`, at its birth) and
//!   its reaper killed: nothing of the probe stays once the probe is over;
//! - `/etc/passwd` through `/proc/<pid>/root`: the `HOME` lookup does not follow it;
//! - an init that enters a mount namespace of its own, and a paused (frozen) container: the
//!   probe is refused.
//!
//! The tests find the probe path by the helper's marker in its command line (it runs from a
//! memfd: its executable's name is a number).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::{SecurityContext, bin_path};
use podward_prober::direct_exec::init::HELPER_ARG;
use podward_prober::handler::exec::runner::ExecError;

#[path = "support/exec_direct.rs"]
mod support;
use support::*;

const ATTACK_C: &str = include_str!("exec_direct_staging/attack.c");

/// Builds the attacker into `out` (mounted at `/out` in the container).
fn build_attacker(out: &Path) {
    let src = out.join("attack.c");
    std::fs::write(&src, ATTACK_C).expect("write attack.c");
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(out.join("attack"))
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc -static attack.c: {status}");
}

/// Processes of the probe path (the helper's marker, or `also`) in the PID namespace of the
/// host process `init`.
fn probe_processes_in(init: i32, also: &str) -> Vec<i32> {
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let theirs = ns(init);
    let mut found = running(HELPER_ARG);
    found.extend(running(also));
    found.retain(|p| theirs.is_some() && ns(*p) == theirs);
    found
}

/// No process of the probe path is ever visible in the container before it is in every
/// namespace of the container: a root container that stops each one it sees and reads its
/// mount table and network interfaces finds only its own.
#[tokio::test]
async fn nothing_of_the_probe_is_seen_in_the_container_outside_its_namespaces() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    build_attacker(out.path());
    let sec = SecurityContext::default();
    let p = attacker_pod(
        &driver,
        &node,
        "stage",
        &["/out/attack", "stage"],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    for _ in 0..40 {
        let o = run(&direct, &id, &["true"], Duration::from_secs(30))
            .await
            .expect("direct exec");
        assert_eq!(o.exit_code, 0, "{o:?}");
    }
    let log = log_of(out.path());
    assert!(
        !lines_with(&log, &["saw"]).is_empty(),
        "the attacker never saw the probe path (the test proves nothing):\n{log}"
    );
    let foreign = lines_with(&log, &["foreign-mnt", "foreign-net"]);
    assert!(
        foreign.is_empty(),
        "the container saw the probe path outside its namespaces:\n{}\n\nfull log:\n{log}",
        foreign.join("\n")
    );
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// A container granted `SYS_PTRACE` attaches to the reaper while the probe command runs and
/// makes it call `mount(2)`: the reaper holds no capability (and its filter refuses the call).
#[tokio::test]
async fn a_ptrace_capable_container_gains_nothing_from_the_reaper() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    build_attacker(out.path());
    let sec = SecurityContext {
        add_capabilities: vec!["SYS_PTRACE".into()],
        ..SecurityContext::default()
    };
    let p = attacker_pod(
        &driver,
        &node,
        "ptrace",
        &["/out/attack", "ptrace"],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    for _ in 0..3 {
        let r = run(&direct, &id, &["sleep", "3607"], Duration::from_secs(3)).await;
        assert!(matches!(r, Err(ExecError::Timeout { .. })), "{r:?}");
    }
    let log = log_of(out.path());
    let mounts = lines_with(&log, &["mount"]);
    assert!(
        !mounts.is_empty(),
        "the attacker never reached the reaper (the test proves nothing):\n{log}"
    );
    let won: Vec<&String> = mounts.iter().filter(|l| l.ends_with(" 0")).collect();
    assert!(
        won.is_empty(),
        "the reaper mounted a tmpfs for the container: {won:?}\n\nfull log:\n{log}"
    );
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// The container stops the probe command before its `execve` and kills the reaper: once the
/// probe is over, nothing of it is left in the container.
#[tokio::test]
async fn a_command_orphaned_before_its_execve_dies_with_its_probe() {
    orphaned_commands_die_with_their_probe("orphan", SecurityContext::default(), "sleep 3609")
        .await;
}

/// A container granted `SYS_PTRACE` attaches to the reaper, so that the command is born stopped
/// (before it could ask for its parent death signal), and kills the reaper: the orphan still
/// dies with its probe.
#[tokio::test]
async fn a_command_orphaned_at_its_birth_dies_with_its_probe() {
    let sec = SecurityContext {
        add_capabilities: vec!["SYS_PTRACE".into()],
        ..SecurityContext::default()
    };
    orphaned_commands_die_with_their_probe("birth", sec, "sleep 3612").await;
}

/// Runs probes of `command` against the attacker `mode` until it has orphaned one, then waits
/// for every process of the probe path to be gone from the container.
async fn orphaned_commands_die_with_their_probe(mode: &str, sec: SecurityContext, command: &str) {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    build_attacker(out.path());
    let p = attacker_pod(
        &driver,
        &node,
        mode,
        &["/out/attack", mode],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let init = pid_of(&format!("/out/attack {mode}")).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    let argv: Vec<&str> = command.split(' ').collect();
    let mut answers = Vec::new();
    for _ in 0..30 {
        let r = run(&direct, &id, &argv, Duration::from_secs(1)).await;
        answers.push(format!("{r:?}"));
        if !lines_with(&log_of(out.path()), &["orphaned"]).is_empty() {
            break;
        }
    }
    let log = log_of(out.path());
    assert!(
        !lines_with(&log, &["orphaned"]).is_empty(),
        "the attacker never orphaned a command (the test proves nothing):\n{log}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = probe_processes_in(init, command);
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "left in the container: {left:?}; answers: {answers:?}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// `/etc/passwd` as a link through `/proc/1/root`: the `HOME` lookup does not follow a
/// magic link (a link within the container's root is followed, as runc follows it).
#[tokio::test]
async fn the_home_lookup_never_follows_a_proc_root_link() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let script = "mkdir -p /x && printf 'root:x:0:0:root:/pwned:/bin/sh\\n' > /x/passwd && \
                  rm -f /etc/passwd && ln -s /x/passwd /etc/passwd && \
                  touch /out/ready && exec sleep 3608";
    let sec = SecurityContext::default();
    let p = attacker_pod(
        &driver,
        &node,
        "passwd",
        &["/bin/sh", "-c", script],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    let home = ["/bin/sh", "-c", "echo $HOME"];
    let t = Duration::from_secs(10);
    let o = run(&direct, &id, &home, t).await.expect("direct exec");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "/pwned\n",
        "a link inside the container is followed: {o:?}"
    );
    let relink = ["/bin/sh", "-c", "ln -sf /proc/1/root/x/passwd /etc/passwd"];
    let o = run(&direct, &id, &relink, t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0, "{o:?}");
    let o = run(&direct, &id, &home, t).await.expect("direct exec");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "/\n",
        "the lookup followed /proc/1/root: {o:?}"
    );
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// An init that enters a mount namespace of its own (`SYS_ADMIN`) after its first probe: the
/// next probe is refused instead of joining it.
#[tokio::test]
async fn an_init_that_unshares_a_mount_namespace_is_refused() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let script = "touch /out/ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; \
                  exec unshare -m sleep 3610";
    let sec = SecurityContext {
        add_capabilities: vec!["SYS_ADMIN".into()],
        ..SecurityContext::default()
    };
    let p = attacker_pod(
        &driver,
        &node,
        "mntns",
        &["/bin/sh", "-c", script],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    let t = Duration::from_secs(10);
    let o = run(&direct, &id, &["touch", "/tmp/go"], t)
        .await
        .expect("the first probe runs");
    assert_eq!(o.exit_code, 0, "{o:?}");
    let init = pid_of("sleep 3610").await;
    let own = std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace");
    let before = std::fs::read_link(format!("/proc/{init}/ns/mnt")).expect("init's mnt");
    assert_ne!(before, own);
    let r = run(&direct, &id, &["sh", "-c", "echo ran"], t).await;
    match &r {
        Err(ExecError::Runtime { message, .. }) => assert!(
            message.contains("mnt namespace"),
            "the refusal says why: {message}"
        ),
        other => panic!("the probe ran in a namespace the container made: {other:?}"),
    }
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// The container's v1 freezer cgroup directory (`None` without a v1 freezer).
fn freezer_of(pid: i32) -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',')
            .any(|c| c == "freezer")
            .then(|| path.to_owned())
    })?;
    let dir = Path::new("/sys/fs/cgroup/freezer").join(path.trim_start_matches('/'));
    dir.join("freezer.state").exists().then_some(dir)
}

/// A paused container (its freezer cgroup frozen): probes are refused at once, as `runc exec`
/// refuses, and nothing of them waits frozen; thawed, it is probed again.
#[tokio::test]
async fn a_paused_container_is_refused_and_holds_nothing_of_the_probe() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let script = "touch /out/ready; exec sleep 3611";
    let sec = SecurityContext::default();
    let p = attacker_pod(
        &driver,
        &node,
        "paused",
        &["/bin/sh", "-c", script],
        out.path(),
        sec,
        &[],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let init = pid_of("sleep 3611").await;
    let Some(freezer) = freezer_of(init) else {
        eprintln!("no v1 freezer on this node: nothing to pause with");
        return;
    };
    let direct = runner(&node, bin_path("podward-prober"), true);
    let t = Duration::from_secs(2);
    let o = run(&direct, &id, &["true"], t).await.expect("direct exec");
    assert_eq!(o.exit_code, 0, "{o:?}");
    let in_freezer = || -> Vec<i32> {
        running(HELPER_ARG)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cgroup"))
                    .is_ok_and(|c| c.lines().any(|l| l.contains("freezer") && l.ends_with(&id)))
            })
            .collect()
    };
    // The answer comes before the first probe's reaper has exited (its exit is awaited off the
    // probe's path): the freeze is about the next probe, so it waits for that one to be gone.
    eventually(
        "the first probe's processes to leave the container",
        Duration::from_secs(10),
        async || in_freezer().is_empty(),
    )
    .await;
    std::fs::write(freezer.join("freezer.state"), "FROZEN").expect("freeze");
    let r = run(&direct, &id, &["true"], t).await;
    let frozen_helpers = in_freezer();
    std::fs::write(freezer.join("freezer.state"), "THAWED").expect("thaw");
    match &r {
        Err(ExecError::Runtime { message, .. }) => assert!(
            message.contains("paused"),
            "the refusal says why: {message}"
        ),
        other => panic!("a probe of a paused container: {other:?}"),
    }
    assert!(
        frozen_helpers.is_empty(),
        "helpers in the frozen cgroup: {frozen_helpers:?}"
    );
    let o = run(&direct, &id, &["true"], t).await.expect("thawed");
    assert_eq!(o.exit_code, 0, "{o:?}");
    drop(direct);
    p.delete().await.expect("delete pod");
}
