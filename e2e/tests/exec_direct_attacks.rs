//! Direct exec attacked from inside the container, on the real containerd + runc: a plain
//! `root` container (no user namespace, no seccomp, no AppArmor here) that knows how the prober
//! enters it and tries, during real probes, what a hostile workload would.
//!
//! - `/proc/<pid>/mem` (and `maps`) of every process of the probe path it can see, while a
//!   `PATH` of symbolic-link loops that the probe command is resolved through holds it open for
//!   about a second per probe.
//! - `/proc/<pid>/exe` of whatever runs the helper's code in the container, kept open and
//!   reopened for writing through `/proc/self/fd` once the probes are over (CVE-2019-5736), with
//!   the same slow `PATH`.
//! - `/etc/passwd` as a FIFO: nothing may pile up in the prober or the container.
//! - an init that unshares a user namespace after its first probe: the next probe is refused.
//! - `SIGSTOP` to the reaper and the command: the probe still ends, and its processes with it.
//!
//! Each attacker writes what it saw and what it managed into a host directory mounted at `/out`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::{Driver, Pod, SecurityContext, TestNode, bin_path};
use podward_prober::direct_exec::init::HELPER_ARG;
use podward_prober::handler::exec::runner::{ExecError, ExecRunner, ExecVia};

#[path = "support/exec_direct.rs"]
mod support;
use support::*;

/// A root pod running `script` with `sh` as its init, `out` mounted at `/out`.
async fn attacker(
    driver: &Driver,
    node: &TestNode,
    name: &str,
    script: &str,
    out: &Path,
    env: &[(&str, &str)],
) -> Pod {
    let command = ["/bin/sh", "-c", script];
    let sec = SecurityContext::default();
    attacker_pod(driver, node, name, &command, out, sec, env).await
}

/// Every process of the container's PID namespace whose init has `pid` on the host.
fn container_procs(init: i32) -> usize {
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let Some(theirs) = ns(init) else {
        return 0;
    };
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| ns(*p).as_ref() == Some(&theirs))
        .count()
}

/// The host PID of a process of the attacker running `script` (its init, or a subshell: they
/// are all in its namespaces).
fn pid_of_script(script: &str) -> i32 {
    let cmdline = format!("/bin/sh -c {script}");
    let found = running(cmdline.trim());
    *found.first().expect("the attacker runs")
}

/// Scans the container's `/proc` for the probe path (command lines with the helper's marker)
/// and tries each process's `maps` and `mem` (read, read-write, then a write of the bytes just
/// read back where they were: harmless, but a write into that process).
///
/// A success counts only if the command line still carries the marker once the access is done
/// (the `mem` descriptor still open): an `execve` replaces the whole memory image for good, so a
/// process showing the marker after the access was still the probe path during it. Without that
/// re-check, a probe command that reaches `execve` between the scan and the `open` (a `true`
/// from the container's own `/bin`, fair game for its root) would read as a breach.
const MEM_ATTACKER: &str = r#"
still() { tr '\0' ' ' < $1/cmdline 2>/dev/null | grep -qF -- "$m"; }
touch /out/ready
while :; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null) || continue
    case "$c" in *"$m"*) ;; *) continue;; esac
    echo "saw $p $c" >> /out/log
    a=$(head -n 1 $d/maps 2>/dev/null | cut -d- -f1)
    still $d || a=
    [ -n "$a" ] && echo "maps $p $a" >> /out/log
    ( exec 8<$d/mem && still $d ) 2>/dev/null && echo "read-open $p" >> /out/log
    if ( exec 8<>$d/mem && still $d ) 2>/dev/null; then
      echo "rw-open $p" >> /out/log
      if [ -n "$a" ] && dd if=$d/mem bs=1 skip=$((0x$a)) count=8 of=/tmp/b 2>/dev/null &&
         dd if=/tmp/b of=$d/mem bs=1 seek=$((0x$a)) conv=notrunc 2>/dev/null && still $d; then
        echo "wrote $p" >> /out/log
      fi
    fi
  done
  sleep 0.01
done
"#;

/// The probe path in a container that reads and writes `/proc/<pid>/mem` of every process of
/// it: the attacker sees the helper's processes, and can neither map nor open any of them.
#[tokio::test]
async fn proc_pid_mem_of_the_probe_path_is_closed_to_the_container() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    // The command's PATH walk lasts a while before `true` is found in /bin.
    let script = format!("{SLOW_PATH_SETUP}{MEM_ATTACKER}");
    let path = slow_path();
    let p = attacker(
        &driver,
        &node,
        "mem",
        &script,
        out.path(),
        &[("PATH", &path)],
    )
    .await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    for _ in 0..4 {
        let o = run(&direct, &id, &["true"], Duration::from_secs(60))
            .await
            .expect("direct exec");
        assert_eq!(o.exit_code, 0, "{o:?}");
    }
    let log = log_of(out.path());
    assert!(
        !lines_with(&log, &["saw"]).is_empty(),
        "the attacker never saw the probe path (the test proves nothing):\n{log}"
    );
    let got = lines_with(&log, &["maps", "read-open", "rw-open", "wrote"]);
    assert!(
        got.is_empty(),
        "the container reached the memory of the probe path:\n{}\n\nfull log:\n{log}",
        got.join("\n")
    );
    p.delete().await.expect("delete pod");
}

/// Keeps a descriptor of the executable of every process it can see (but its own busybox) and
/// tries to append to it through `/proc/self/fd` until the test says the probes are over; logs
/// the probe path's processes it saw (their command lines carry the helper's marker).
const EXE_ATTACKER: &str = r#"
bb=$(stat -L -c %d:%i /bin/busybox)
touch /out/ready
while :; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in *"$m"*) echo "saw $p" >> /out/log;; esac
    id=$(stat -L -c %d:%i $d/exe 2>/dev/null) || continue
    [ "$id" = "$bb" ] && continue
    grep -qx "$id" /tmp/held 2>/dev/null && continue
    echo "$id" >> /tmp/held
    echo "exe $p $id" >> /out/log
    ( exec 3<$d/exe || exit 0
      while :; do
        done=; [ -e /out/done ] && done=1
        if printf PWNED >> /proc/self/fd/3 2>/dev/null; then echo "wrote $id" >> /out/log; exit 0; fi
        [ -n "$done" ] && { echo "after $id" >> /out/log; exit 0; }
        sleep 0.05
      done ) &
  done
  sleep 0.01
done
"#;

/// Makes `/l0` a loop of 40 symbolic links, each through 800 `..`: about a millisecond for
/// each `PATH` entry `/l0` to fail, so a command resolved through [`slow_path`] takes a while
/// to set up. Sets `m` to the helper's marker, built so that the script (the attacker's
/// own command line) never holds it.
const SLOW_PATH_SETUP: &str = r#"
pad=; i=0; while [ $i -lt 800 ]; do pad="${pad}a/../"; i=$((i+1)); done
mkdir -p /a
i=0; while [ $i -lt 40 ]; do ln -s "/${pad}l$(( (i + 1) % 40 ))" "/l$i"; i=$((i+1)); done
export PATH=/bin
m=__podward-exec-; m="${m}init"
"#;

/// The container's `PATH`: 200 slow entries, then `/bin` (about 0.25 s on an idle machine,
/// several seconds on a loaded one).
fn slow_path() -> String {
    format!("{}/bin", "/l0:".repeat(200))
}

/// One round of the `/proc/<pid>/exe` attack with the helper binary at `helper`.
async fn exe_attack(node: &TestNode, driver: &Driver, name: &str, standby: bool) {
    let out = tempfile::tempdir().expect("tempdir");
    // A writable copy of the helper, as `--exec-helper` may name one.
    let helper = out.path().join("podward-prober-copy");
    std::fs::copy(bin_path("podward-prober"), &helper).expect("copy the helper");
    let before = std::fs::read(&helper).expect("read the helper");
    let meta = std::fs::metadata(&helper).expect("stat the helper");
    let host_id = format!("{}:{}", meta.dev(), meta.ino());
    let script = format!("{SLOW_PATH_SETUP}{EXE_ATTACKER}");
    let path = slow_path();
    let p = attacker(driver, node, name, &script, out.path(), &[("PATH", &path)]).await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(node, helper.clone(), standby);
    for _ in 0..3 {
        let o = run(&direct, &id, &["true"], Duration::from_secs(60))
            .await
            .expect("direct exec");
        assert_eq!(o.exit_code, 0, "{name}: {o:?}");
    }
    let mnt = std::fs::read_link(format!("/proc/{}/ns/mnt", pid_of_script(&script)))
        .expect("the attacker's mount namespace");
    eventually(
        &format!("{name}: the probes' processes to leave the container"),
        Duration::from_secs(10),
        async || {
            running(HELPER_ARG)
                .iter()
                .all(|p| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok() != Some(mnt.clone()))
        },
    )
    .await;
    assert!(
        !lines_with(&log_of(out.path()), &["saw"]).is_empty(),
        "{name}: the attacker never saw the probe path (the test proves nothing)"
    );
    std::fs::write(out.path().join("done"), b"").expect("write done");
    let held = lines_with(&log_of(out.path()), &["exe"]).len();
    eventually(
        &format!("{name}: every holder's last try after the probes"),
        Duration::from_secs(10),
        async || {
            let log = log_of(out.path());
            lines_with(&log, &["after", "wrote"]).len() >= held
        },
    )
    .await;
    let log = log_of(out.path());
    let reached: Vec<String> = lines_with(&log, &["exe"])
        .into_iter()
        .filter(|l| l.ends_with(&format!(" {host_id}")))
        .collect();
    let wrote = lines_with(&log, &["wrote"]);
    let after = std::fs::read(&helper).expect("read the helper");
    assert!(
        reached.is_empty() && wrote.is_empty() && after == before,
        "{name}: the container reached the host's helper file {host_id} (held: {reached:?}, \
         wrote: {wrote:?}, file changed: {})\n{log}",
        after != before
    );
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// With a standby helper (a process always runs the helper file, so it cannot be opened for
/// writing): the container still never holds the helper's file.
#[tokio::test]
async fn proc_pid_exe_never_reaches_the_helper_file() {
    let (node, driver) = node_and_driver().await;
    exe_attack(&node, &driver, "exe-standby", true).await;
}

/// A writable `--exec-helper` copy that nothing runs between probes (`--exec-standby=false`):
/// the container can neither hold nor rewrite it.
#[tokio::test]
async fn proc_pid_exe_never_rewrites_a_writable_helper_copy() {
    let (node, driver) = node_and_driver().await;
    exe_attack(&node, &driver, "exe-cold", false).await;
}

/// What the prober holds: its descriptors and live tokio tasks.
fn prober_footprint() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").expect("fds").count();
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    (fds, tasks)
}

/// A FIFO at `/etc/passwd` (read for `HOME`): 1 s probes for 25 s leave the prober's
/// descriptors and tasks and the container's processes where they were after the first.
#[tokio::test]
async fn a_fifo_passwd_leaks_nothing() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let script = "rm -f /etc/passwd; mkfifo /etc/passwd; touch /out/ready; exec sleep 3604";
    let p = attacker(&driver, &node, "fifo", script, out.path(), &[]).await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let init = pid_of("sleep 3604").await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    let t = Duration::from_secs(1);
    let first = run(&direct, &id, &["true"], t).await;
    let settle = async || {
        eventually(
            "the first probe's helpers to leave the container",
            Duration::from_secs(10),
            async || container_procs(init) == 1,
        )
        .await
    };
    settle().await;
    let base = prober_footprint();
    let start = tokio::time::Instant::now();
    let mut answers = vec![format!("{first:?}")];
    while start.elapsed() < Duration::from_secs(25) {
        let r = run(&direct, &id, &["true"], t).await;
        answers.push(format!("{r:?}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Whatever the answers, within a few seconds nothing the probes started is left.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (procs, now) = (container_procs(init), prober_footprint());
        if procs == 1 && now.0 <= base.0 && now.1 <= base.1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {} probes: container processes {procs} (init alone: 1), prober fds {} (was \
             {}), tokio tasks {} (was {}); answers: {answers:?}",
            answers.len(),
            now.0,
            base.0,
            now.1,
            base.1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// An init that enters a user namespace of its own after its first probe: the next probe is
/// refused, with the reason, instead of joining namespaces the container built.
#[tokio::test]
async fn an_init_that_unshares_a_user_namespace_is_refused() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let script = "touch /out/ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; \
                  exec unshare -r -m sleep 3605";
    let p = attacker(&driver, &node, "userns", script, out.path(), &[]).await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let direct = runner(&node, bin_path("podward-prober"), true);
    let t = Duration::from_secs(10);
    let o = run(&direct, &id, &["touch", "/tmp/go"], t)
        .await
        .expect("the first probe runs");
    assert_eq!(o.exit_code, 0, "{o:?}");
    let own = std::fs::read_link("/proc/self/ns/user").expect("own user namespace");
    eventually(
        "the init to enter its own user namespace",
        Duration::from_secs(10),
        async || {
            running("sleep 3605")
                .iter()
                .any(|p| std::fs::read_link(format!("/proc/{p}/ns/user")).is_ok_and(|ns| ns != own))
        },
    )
    .await;
    let r = run(&direct, &id, &["sh", "-c", "echo ran"], t).await;
    match &r {
        Err(ExecError::Runtime { message, .. }) => assert!(
            message.contains("user namespace"),
            "the refusal says why: {message}"
        ),
        other => panic!("the probe ran in namespaces the container built: {other:?}"),
    }
    let choice = direct.choice(&id).expect("a choice");
    assert!(
        choice.runner == ExecVia::Refused && choice.reason.contains("user namespace"),
        "{choice:?}"
    );
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// Stops (`SIGSTOP`, allowed: same uid) every process of the probe path it sees, again and
/// again.
const STOPPER: &str = r#"
m=__podward-exec-; m="${m}init"
touch /out/ready
while :; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in
      *"$m"*) kill -STOP $p 2>/dev/null && echo "stopped $p" >> /out/log;;
    esac
  done
  sleep 0.01
done
"#;

/// A container that stops the reaper (and the command before its execve) during probes: each
/// probe still ends at its timeout, and nothing it started stays, in the container or the
/// prober.
#[tokio::test]
async fn a_reaper_the_container_stops_is_killed_with_its_tree() {
    let (node, driver) = node_and_driver().await;
    let out = tempfile::tempdir().expect("tempdir");
    let p = attacker(&driver, &node, "stopper", STOPPER, out.path(), &[]).await;
    let id = p.container_id("app").expect("container id");
    wait_ready(out.path()).await;
    let mnt = std::fs::read_link(format!("/proc/{}/ns/mnt", pid_of_script(STOPPER)))
        .expect("the attacker's mount namespace");
    let direct = runner(&node, bin_path("podward-prober"), true);
    let t = Duration::from_secs(1);
    let mut answers = Vec::new();
    for _ in 0..5 {
        let started = tokio::time::Instant::now();
        let r = run(&direct, &id, &["sleep", "3606"], t).await;
        assert!(
            started.elapsed() < t + Duration::from_secs(6),
            "the probe ended {:?} after it started: {r:?}",
            started.elapsed()
        );
        answers.push(format!("{r:?}"));
    }
    assert!(
        !lines_with(&log_of(out.path()), &["stopped"]).is_empty(),
        "the attacker never stopped a process of the probe path (the test proves nothing)"
    );
    let left = || {
        let helpers: Vec<i32> = running(HELPER_ARG)
            .into_iter()
            .filter(|p| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok() == Some(mnt.clone()))
            .collect();
        (helpers, running("sleep 3606"))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while left() != (vec![], vec![]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "left in the container (helpers, commands): {:?}; answers: {answers:?}",
            left()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(direct);
    p.delete().await.expect("delete pod");
}

/// The memory attacker finds the probe path by the helper's marker, which it builds at run time
/// so that its own shell (whose command line is the script) never matches it.
#[test]
fn the_memory_attacker_looks_for_the_helper_marker() {
    assert!(!MEM_ATTACKER.contains(HELPER_ARG));
    assert_eq!(format!("{}{}", "__podward-exec-", "init"), HELPER_ARG);
}
