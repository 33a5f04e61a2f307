//! Only kubelet's names are acted on (real containerd, real binary): an acting housekeeper
//! (`--act`) whose roots hold things that are not kubelet's (user files, a cgroup with a live
//! process named almost like a pod) removes exactly the real orphan and reports the rest as
//! FOREIGN; `plan` against it says it acts, in the table and in `--json`; and
//! `plan --local --log-root /` refuses instead of listing `/etc`, `/usr`, ... as orphans.

#[path = "support/housekeeper.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::{Daemon, TestNode, bin_path, free_port};
use support::{PodCgroup, config, leave_dirs};

const ORPHAN: &str = "0bad0000-aaaa-4bbb-8ccc-00000000000f";
/// A cgroup under kubepods that is `pod` + something that is not a pod UID.
const NOT_A_UID: &str = "0bad0000-aaaa-4bbb-8ccc-00000000000F";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn plan(socket: &Path, json: bool) -> String {
    let mut cmd = Command::new(bin_path("podward-housekeeper"));
    cmd.arg("plan").arg("--socket").arg(socket);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("run plan");
    assert!(
        out.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[tokio::test]
async fn an_acting_housekeeper_removes_only_kubelets_leftovers_and_its_plan_says_it_acts() {
    podward_e2e::init_test_logging();
    let node = TestNode::start().await.expect("start node");
    let cfg = config(&node);

    // The real orphan: a pod cgroup with a running process, its pod dir and its log dir.
    let mut orphan_cg = PodCgroup::create(&node, ORPHAN);
    let orphan_pid = orphan_cg.spawn_sleeper();
    let (orphan_dir, orphan_log) = leave_dirs(&cfg, ORPHAN);
    // Not kubelet's: a user's files under both roots, and a cgroup next to the pod cgroups
    // whose name is one case-change away from a pod's, with a live process in it.
    let user_files = [
        cfg.log_root.join("etc/passwd"),
        cfg.log_root.join("home/alice/thesis.txt"),
        cfg.log_root.join("important-data/db.sqlite"),
        cfg.log_root.join("default_web_not-a-uid/app/0.log"),
        cfg.kubelet_root.join("pods/config/kubelet.conf"),
        cfg.kubelet_root.join("pods/not-a-uid/volumes/data"),
    ];
    for f in &user_files {
        write(f, "user data");
    }
    let mut foreign_cg = PodCgroup::create(&node, NOT_A_UID);
    let foreign_pid = foreign_cg.spawn_sleeper();

    let admin = format!("127.0.0.1:{}", free_port());
    let s = |p: &Path| p.display().to_string();
    let daemon = Daemon::spawn(
        "podward-housekeeper",
        &[
            "--act",
            "--socket",
            &s(&cfg.socket),
            "--shim-socket",
            &s(&cfg.shim_socket),
            "--prober-socket",
            &s(&cfg.prober_socket),
            "--containerd-socket",
            &s(&cfg.common.containerd_socket),
            "--kubelet-cgroup-root",
            &cfg.kubelet_cgroup_root,
            "--kubelet-root",
            &s(&cfg.kubelet_root),
            "--log-root",
            &s(&cfg.log_root),
            "--mountinfo",
            "/proc/self/mountinfo",
            "--orphan-grace",
            "0s",
            "--interval",
            "1s",
            "--admin-addr",
            &admin,
        ],
    )
    .await
    .expect("spawn the housekeeper");
    daemon
        .wait_healthy(admin.parse().expect("addr"), Duration::from_secs(30))
        .await
        .expect("healthy");

    // Defect 6: the plan of an acting daemon says it acts.
    let table = plan(&cfg.socket, false);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("ACTS") && !header.contains("dry run"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&plan(&cfg.socket, true)).expect("json");
    assert_eq!(json["dry_run"], false, "{json}");
    assert_eq!(json["preview"], true, "{json}");

    eventually(
        "the orphan's cgroup, pod dir and log dir to go",
        Duration::from_secs(60),
        async || !orphan_cg.exists_anywhere() && !orphan_dir.exists() && !orphan_log.exists(),
    )
    .await;
    assert!(
        !orphan_cg.alive(orphan_pid),
        "the orphan's process is killed"
    );

    // Defect 1: nothing else was touched, after several more passes.
    let passes = || {
        let v: serde_json::Value = serde_json::from_str(&plan(&cfg.socket, true)).expect("json");
        v["pass"].as_u64().unwrap_or(0)
    };
    let seen = passes();
    eventually("three more passes", Duration::from_secs(30), async || {
        passes() >= seen + 3
    })
    .await;
    for f in &user_files {
        assert_eq!(
            std::fs::read_to_string(f).ok().as_deref(),
            Some("user data"),
            "{} was touched",
            f.display()
        );
    }
    assert!(
        foreign_cg.alive(foreign_pid),
        "a non-pod cgroup's process was killed"
    );
    assert!(
        foreign_cg.paths().iter().all(|p| p.exists()),
        "a non-pod cgroup was removed"
    );
    let table = plan(&cfg.socket, false);
    for name in ["etc", "home", "important-data", "config", "not-a-uid"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("FOREIGN") && l.contains(&format!("/{name}"))),
            "{name} not reported as FOREIGN:\n{table}"
        );
    }
    drop(daemon);
}

#[test]
fn plan_local_with_a_log_root_of_slash_refuses_and_lists_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("kubelet/pods")).expect("kubelet root");
    let out = Command::new(bin_path("podward-housekeeper"))
        .args(["plan", "--local", "--log-root", "/", "--kubelet-root"])
        .arg(dir.path().join("kubelet"))
        .arg("--containerd-socket")
        .arg(dir.path().join("containerd.sock"))
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "plan --local ran:\n{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("--log-root / is the filesystem root"),
        "{stderr}"
    );
}
