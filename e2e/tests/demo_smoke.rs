//! The README's first command must show all of podward: run the demo binary for 25 s, as a
//! person would see it (output not a terminal: no colour), and check what it printed — the
//! prober killing and the driver restarting the flaky container after its preStop hook, the
//! readiness gate condition going False and back to True in the API server, kubelet's
//! `Unhealthy` and `Killing` events, the housekeeper planning the orphan's removal with every
//! source read (no warning from any daemon), and nothing of the run left on the machine.

use std::path::Path;
use std::process::Command;

use podward_e2e::Footprint;

/// Runs the demo with `args` (plus `--seconds 25 --ephemeral-ports`); its stdout and stderr.
fn run_demo(extra: &[&str]) -> (String, String) {
    for name in ["podward-shim", "podward-prober", "podward-housekeeper"] {
        assert!(podward_e2e::bin_path(name).exists(), "{name} not built");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_podward-demo"))
        .args(["--seconds", "25", "--ephemeral-ports"])
        .args(extra)
        .output()
        .expect("run podward-demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "demo failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The index of the first line of `lines` at or after `from` with every one of `words`.
fn find(lines: &[&str], from: usize, words: &[&str]) -> Option<usize> {
    (from..lines.len()).find(|&i| words.iter().all(|w| lines[i].contains(w)))
}

/// What every run must show, and leave behind nothing.
fn check_common(stdout: &str, stderr: &str) {
    let all = format!("{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let need = |words: &[&str], what: &str| {
        assert!(
            find(&lines, 0, words).is_some(),
            "{what}: no line with {words:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    };
    // The exec mode the defaults chose, said in so many words.
    need(
        &["flaky: exec probes run", "default --exec-mode chose"],
        "exec mode",
    );
    // A liveness kill by the prober, its preStop hook first, and the restart.
    need(
        &[
            "flaky: killed by podward-prober, liveness probe failed",
            "its preStop hook ran first",
        ],
        "kill after the preStop hook",
    );
    need(
        &["flaky: restarted by the kubelet-like driver (restartCount 1)"],
        "restart",
    );
    // The gate condition in the API server: False, then True again.
    let gate = "condition podward.io/ready=";
    let false_at = find(
        &lines,
        0,
        &[&format!("{gate}False"), "ReadinessProbeFailed"],
    );
    let true_after = false_at.and_then(|i| find(&lines, i, &[&format!("{gate}True")]));
    assert!(
        true_after.is_some(),
        "the gate never went False then True:\n{stdout}"
    );
    // kubelet's events, and the kubectl-describe table.
    need(
        &["API server: event Warning Unhealthy from podward-prober"],
        "Unhealthy event",
    );
    need(
        &["API server: event Normal Killing from podward-prober"],
        "Killing event",
    );
    need(
        &["Type", "Reason", "Age", "From", "Message"],
        "events table",
    );
    // The housekeeper read every source and planned the orphan's removal with its reasons.
    need(
        &[
            "read cgroups",
            "runtime",
            "pod_dirs",
            "log_dirs",
            "mounts",
            "cgroupfs",
        ],
        "housekeeper sources",
    );
    need(
        &[
            "housekeeper pass",
            "remove pod cgroup",
            "of the orphan old-job",
            "orphaned pod cgroup",
        ],
        "housekeeper plan for the orphan",
    );
    need(
        &[
            "remove pod dir",
            "of the orphan old-job",
            "orphaned pod directory",
        ],
        "housekeeper plan for the orphan's pod dir",
    );
    need(&["live pod default/demo untouched"], "live pod untouched");
    // No warning or error from a daemon (the prober's log line of each kill it makes is WARN by
    // design and the demo counts it apart; every other one would be printed and counted).
    assert!(
        !all.lines()
            .any(|l| l.starts_with("[podward-") && (l.contains(" WARN ") || l.contains(" ERROR "))),
        "a daemon warned:\n{all}"
    );
    need(
        &["daemon warnings and errors during the run: 0;"],
        "warning count",
    );
    assert!(!all.contains('\x1b'), "colour without a terminal:\n{all}");
    // Nothing left: processes, mounts, cgroups, the node's directory.
    let dir = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("node directory "))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no node directory line:\n{stdout}"));
    let footprint = Footprint::of_node_dir(Path::new(dir)).expect("a node directory name");
    assert_eq!(footprint.leaks(), Vec::<String>::new(), "left behind");
}

#[test]
fn demo_shows_kills_gates_events_and_the_housekeepers_plan_and_leaves_nothing() {
    let (stdout, stderr) = run_demo(&[]);
    check_common(&stdout, &stderr);
    assert!(
        stdout.contains("dry run: the orphan's cgroup, pod dir and log dir are all still there"),
        "dry run touched the orphan:\n{stdout}"
    );
    assert!(
        stdout.contains("would remove pod cgroup of the orphan old-job"),
        "no dry-run plan:\n{stdout}"
    );
}

#[test]
fn demo_with_act_cleans_the_orphan_and_leaves_the_live_pod() {
    let (stdout, stderr) = run_demo(&["--act"]);
    check_common(&stdout, &stderr);
    assert!(
        stdout.contains("done: remove pod cgroup of the orphan old-job"),
        "the housekeeper did not act:\n{stdout}"
    );
    assert!(
        stdout.contains("orphan default/old-job cleaned by the housekeeper"),
        "orphan not cleaned:\n{stdout}"
    );
}
