//! Which cgroup driver, decided from the node: containerd's CRI RuntimeConfig first, then the pod
//! cgroup root on disk (`kubepods` vs `kubepods.slice`), then `--cgroup-driver`; a flag that
//! contradicts the node is refused with both named; and a node whose pod cgroup root is nowhere
//! while the runtime reports running pods fails the cgroups source (the plan says why) instead of
//! reporting "ok, 0 items".
//!
//! The decision itself on fake trees; then whole plans through the daemon's own wiring
//! (`plan --local`) against a fake CRI server that answers RuntimeConfig over real gRPC.

#[path = "support/fake_cri.rs"]
#[allow(dead_code)]
mod fake_cri;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use podward_api::cri::{
    CgroupDriver as CriCgroupDriver, PodSandbox, PodSandboxMetadata, PodSandboxState,
};
use podward_housekeeper::config::{Config, DriverName};
use podward_housekeeper::node::cgroup::{
    CgroupDriver, CgroupError, CgroupVersion, DriverFlag, FoundBy, RuntimeAnswer, decide_driver,
    scan_pod_cgroups,
};

const SYSTEMD: DriverFlag = DriverFlag::Set(CgroupDriver::Systemd);
const CGROUPFS: DriverFlag = DriverFlag::Set(CgroupDriver::Cgroupfs);
const SLICE: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod000000a1_0000_4000_8000_0000000000b2.slice";

/// A pure v2 fake tree with `dirs` in it.
fn v2_tree(dirs: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::write(tmp.path().join("cgroup.controllers"), "cpu memory pids\n").expect("controllers");
    for d in dirs {
        fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    tmp
}

/// A hybrid fake tree (`cpu,cpuacct`, `memory`, the named `systemd` hierarchy, `unified`) with
/// `dirs` in every hierarchy.
fn hybrid_tree(dirs: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for v1 in ["cpu,cpuacct", "memory", "systemd"] {
        fs::create_dir_all(tmp.path().join(v1)).expect("mkdir");
        fs::write(tmp.path().join(v1).join("cgroup.procs"), "").expect("procs");
    }
    fs::create_dir_all(tmp.path().join("unified")).expect("mkdir");
    fs::write(tmp.path().join("unified/cgroup.controllers"), "").expect("controllers");
    for h in ["cpu,cpuacct", "memory", "systemd", "unified"] {
        for d in dirs {
            fs::create_dir_all(tmp.path().join(h).join(d)).expect("mkdir");
        }
    }
    tmp
}

fn mismatch(err: CgroupError) -> (CgroupDriver, CgroupDriver, FoundBy, String) {
    let text = err.to_string();
    match err {
        CgroupError::DriverMismatch {
            flag,
            found,
            found_by,
            ..
        } => (flag, found, found_by, text),
        other => panic!("expected DriverMismatch, got {other:?}"),
    }
}

#[test]
fn runtime_config_decides_and_a_flag_against_it_is_refused_naming_both() {
    let tree = v2_tree(&[SLICE]);
    let says_systemd = RuntimeAnswer::Driver(CgroupDriver::Systemd);
    for flag in [DriverFlag::Auto, SYSTEMD] {
        let (layout, d) = decide_driver(tree.path(), "/", flag, &says_systemd).expect("decide");
        assert_eq!(
            (d.driver, d.found_by, d.version),
            (
                Some(CgroupDriver::Systemd),
                FoundBy::RuntimeConfig,
                CgroupVersion::V2
            )
        );
        assert!(
            d.evidence[0].contains("RuntimeConfig reports linux.cgroup_driver=systemd"),
            "{d:?}"
        );
        assert_eq!(d.pod_roots, [tree.path().join("kubepods.slice")]);
        let uids: Vec<_> = scan_pod_cgroups(&layout)
            .expect("scan")
            .into_iter()
            .map(|p| p.uid)
            .collect();
        assert_eq!(uids, ["000000a1-0000-4000-8000-0000000000b2"]);
    }
    let err = decide_driver(tree.path(), "/", CGROUPFS, &says_systemd).expect_err("refused");
    let (flag, found, by, text) = mismatch(err);
    assert_eq!(
        (flag, found, by),
        (
            CgroupDriver::Cgroupfs,
            CgroupDriver::Systemd,
            FoundBy::RuntimeConfig
        )
    );
    for part in [
        "--cgroup-driver=cgroupfs",
        "containerd's CRI RuntimeConfig says systemd",
    ] {
        assert!(text.contains(part), "{text}");
    }

    // containerd outranks the disk: what it names is scanned, the other layout only noted (and
    // its missing root is what the "no pod cgroup root" rule then catches).
    let old = v2_tree(&["kubepods/burstable/pod000000a1-0000-4000-8000-0000000000b2"]);
    let (_, d) = decide_driver(old.path(), "/", DriverFlag::Auto, &says_systemd).expect("decide");
    assert_eq!(d.driver, Some(CgroupDriver::Systemd));
    assert!(d.pod_roots.is_empty(), "{d:?}");
    assert!(
        d.evidence
            .iter()
            .any(|e| e.contains("the cgroupfs layout is on disk too")),
        "{d:?}"
    );
}

#[test]
fn the_layout_decides_when_containerd_does_not_and_a_flag_against_it_is_refused() {
    let silent = [
        RuntimeAnswer::Unimplemented,
        RuntimeAnswer::NoLinuxConfig,
        RuntimeAnswer::Unavailable("connection refused".into()),
    ];
    let sd_tree = hybrid_tree(&[SLICE]);
    let fs_tree = hybrid_tree(&["kubepods/burstable/pod000000a1-0000-4000-8000-0000000000b2"]);
    for answer in &silent {
        let (_, d) = decide_driver(sd_tree.path(), "/", DriverFlag::Auto, answer).expect("sd");
        assert_eq!(
            (d.driver, d.found_by, d.version),
            (
                Some(CgroupDriver::Systemd),
                FoundBy::Layout,
                CgroupVersion::Hybrid
            )
        );
        assert_eq!(d.pod_roots.len(), 4, "every hierarchy: {d:?}");
        let (_, d) = decide_driver(fs_tree.path(), "/", DriverFlag::Auto, answer).expect("fs");
        assert_eq!(
            (d.driver, d.found_by),
            (Some(CgroupDriver::Cgroupfs), FoundBy::Layout)
        );

        // The case: a systemd node, the flag left at cgroupfs.
        let err = decide_driver(sd_tree.path(), "/", CGROUPFS, answer).expect_err("refused");
        let (flag, found, by, text) = mismatch(err);
        assert_eq!(
            (flag, found, by),
            (
                CgroupDriver::Cgroupfs,
                CgroupDriver::Systemd,
                FoundBy::Layout
            )
        );
        for part in [
            "--cgroup-driver=cgroupfs",
            "the layout on disk says systemd",
            "kubepods.slice exists",
            "no kubepods on disk",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        let err = decide_driver(fs_tree.path(), "/", SYSTEMD, answer).expect_err("refused");
        let (flag, found, _, text) = mismatch(err);
        assert_eq!(
            (flag, found),
            (CgroupDriver::Systemd, CgroupDriver::Cgroupfs)
        );
        assert!(text.contains("no kubepods.slice on disk"), "{text}");
    }
}

#[test]
fn both_layouts_need_the_flag_and_no_layout_leaves_it_to_the_flag() {
    let both = v2_tree(&[SLICE, "kubepods/burstable"]);
    let silent = RuntimeAnswer::Unimplemented;
    match decide_driver(both.path(), "/", DriverFlag::Auto, &silent) {
        Err(CgroupError::AmbiguousLayout { cgroupfs, systemd }) => {
            assert_eq!(cgroupfs, both.path().join("kubepods"));
            assert_eq!(systemd, both.path().join("kubepods.slice"));
        }
        other => panic!("expected AmbiguousLayout, got {other:?}"),
    }
    let (_, d) = decide_driver(both.path(), "/", SYSTEMD, &silent).expect("flag decides");
    assert_eq!(
        (d.driver, d.found_by),
        (Some(CgroupDriver::Systemd), FoundBy::Flag)
    );

    let none = v2_tree(&[]);
    let (_, d) = decide_driver(none.path(), "/", SYSTEMD, &silent).expect("flag");
    assert_eq!(
        (d.driver, d.found_by),
        (Some(CgroupDriver::Systemd), FoundBy::Flag)
    );
    let (layout, d) = decide_driver(none.path(), "/", DriverFlag::Auto, &silent).expect("auto");
    assert_eq!((d.driver, d.found_by), (None, FoundBy::Undecided));
    assert!(d.pod_roots.is_empty());
    assert!(scan_pod_cgroups(&layout).expect("scan").is_empty());
}

#[test]
fn kubelet_cgroup_root_is_honoured_for_both_layouts() {
    let fs_tree = v2_tree(&["custom/kubepods/burstable"]);
    let (_, d) = decide_driver(
        fs_tree.path(),
        "/custom",
        DriverFlag::Auto,
        &RuntimeAnswer::Unimplemented,
    )
    .expect("decide");
    assert_eq!(d.driver, Some(CgroupDriver::Cgroupfs));
    assert_eq!(d.pod_roots, [fs_tree.path().join("custom/kubepods")]);
    let sd_tree = v2_tree(&["custom.slice/custom-kubepods.slice"]);
    let (_, d) = decide_driver(
        sd_tree.path(),
        "/custom",
        DriverFlag::Auto,
        &RuntimeAnswer::Unimplemented,
    )
    .expect("decide");
    assert_eq!(d.driver, Some(CgroupDriver::Systemd));
    // A `kubepods` at the top is not under this --kubelet-cgroup-root: it decides nothing.
    let elsewhere = v2_tree(&["kubepods/burstable"]);
    let (_, d) = decide_driver(
        elsewhere.path(),
        "/custom",
        DriverFlag::Auto,
        &RuntimeAnswer::Unimplemented,
    )
    .expect("decide");
    assert_eq!(d.driver, None);
}

#[test]
fn cgroup_versions() {
    let v1 = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(v1.path().join("memory")).expect("mkdir");
    fs::write(v1.path().join("memory/cgroup.procs"), "").expect("procs");
    let (hybrid, v2) = (hybrid_tree(&[]), v2_tree(&[]));
    for (root, version) in [
        (v1.path(), CgroupVersion::V1),
        (hybrid.path(), CgroupVersion::Hybrid),
        (v2.path(), CgroupVersion::V2),
    ] {
        let (_, d) =
            decide_driver(root, "/", CGROUPFS, &RuntimeAnswer::Unimplemented).expect("decide");
        assert_eq!(d.version, version, "{}", root.display());
    }
}

// ---- whole plans, through `plan --local` and a fake CRI server ----

struct Node {
    tmp: tempfile::TempDir,
    _cri: tokio::task::JoinHandle<()>,
}

fn sandbox(uid: &str, state: PodSandboxState) -> PodSandbox {
    PodSandbox {
        id: format!("sb-{uid}"),
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        state: state as i32,
        ..Default::default()
    }
}

impl Node {
    /// A node whose cgroup tree is a fake v2 tree with `dirs`, whose containerd lists
    /// `sandboxes` and answers RuntimeConfig with `driver` (None: UNIMPLEMENTED).
    fn new(dirs: &[&str], sandboxes: Vec<PodSandbox>, driver: Option<CriCgroupDriver>) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cg = tmp.path().join("cgroup");
        fs::create_dir_all(&cg).expect("mkdir");
        fs::write(cg.join("cgroup.controllers"), "cpu memory pids\n").expect("controllers");
        for d in dirs {
            fs::create_dir_all(cg.join(d)).expect("mkdir");
        }
        fs::create_dir_all(tmp.path().join("kubelet/pods")).expect("mkdir");
        fs::create_dir_all(tmp.path().join("logs")).expect("mkdir");
        let cri = fake_cri::serve(
            fake_cri::FakeCri {
                sandboxes,
                cgroup_driver: driver.map(|d| d as i32),
                ..Default::default()
            },
            &tmp.path().join("cri.sock"),
        );
        Self { tmp, _cri: cri }
    }

    fn config(&self, flag: DriverName) -> Config {
        let p = |s: &str| -> PathBuf { self.tmp.path().join(s) };
        Config {
            socket: p("hk.sock"),
            shim_socket: p("shim.sock"),
            prober_socket: p("prober.sock"),
            common: podward_api::daemon::config::Common {
                containerd_socket: p("cri.sock"),
                ..Config::default().common
            },
            cgroup_root: p("cgroup"),
            cgroup_driver: flag,
            systemd_bus: format!("unix:path={}", p("no-bus").display()),
            kubelet_root: p("kubelet"),
            log_root: p("logs"),
            mountinfo: "/proc/self/mountinfo".into(),
            orphan_grace: Duration::ZERO,
            ..Config::default()
        }
    }

    /// A previewed pass rendered as `plan --local` prints it, JSON and the operator's table.
    /// (`plan --local` itself refuses this fake tree: it has no cgroup filesystem.)
    async fn plan(&self, flag: DriverName) -> (serde_json::Value, String) {
        let cfg = self.config(flag);
        let plan = podward_housekeeper::run::node_reconciler(&cfg)
            .pass(podward_housekeeper::reconcile::Mode::Preview)
            .await
            .0;
        let json = podward_housekeeper::report::render(&plan, true).expect("plan as JSON");
        let table = podward_housekeeper::report::render(&plan, false).expect("plan as a table");
        (serde_json::from_str(&json).expect("json"), table)
    }
}

fn cgroups_line(table: &str) -> &str {
    table
        .lines()
        .find(|l| l.trim_start().starts_with("cgroups"))
        .unwrap_or_else(|| panic!("no cgroups line in\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_header_says_which_driver_and_how_it_was_found() {
    let running = vec![sandbox("live-1", PodSandboxState::SandboxReady)];
    let by_cri = Node::new(&[SLICE], running.clone(), Some(CriCgroupDriver::Systemd));
    let (json, table) = by_cri.plan(DriverName::Auto).await;
    assert!(
        table.contains("cgroup driver: systemd (from containerd's CRI RuntimeConfig), cgroup v2"),
        "{table}"
    );
    assert!(cgroups_line(&table).ends_with("ok, 1 items"), "{table}");
    assert_eq!(json["cgroup_driver"]["driver"], "systemd");
    assert_eq!(json["cgroup_driver"]["found_by"], "runtime-config");
    assert_eq!(json["sources_ok"], true);

    let by_layout = Node::new(&[SLICE], running.clone(), None);
    let (json, table) = by_layout.plan(DriverName::Auto).await;
    assert!(
        table.contains("cgroup driver: systemd (from the layout on disk), cgroup v2"),
        "{table}"
    );
    assert!(
        table.contains("containerd does not implement CRI RuntimeConfig"),
        "{table}"
    );
    assert_eq!(json["cgroup_driver"]["found_by"], "layout");

    let cgroupfs = Node::new(
        &["kubepods/burstable/pod000000a1-0000-4000-8000-0000000000b2"],
        running,
        None,
    );
    let (_, table) = cgroupfs.plan(DriverName::Cgroupfs).await;
    assert!(
        table.contains("cgroup driver: cgroupfs (from the layout on disk), cgroup v2"),
        "{table}"
    );
}

/// The node: kubeadm's systemd driver, the chart's flag left at cgroupfs. Refused with
/// both named, whether containerd or the layout is what names systemd; nothing is planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_systemd_node_with_the_flag_at_cgroupfs_is_refused_naming_both() {
    let running = vec![sandbox("live-1", PodSandboxState::SandboxReady)];
    for (driver, said_by) in [
        (
            Some(CriCgroupDriver::Systemd),
            "containerd's CRI RuntimeConfig says systemd",
        ),
        (None, "the layout on disk says systemd"),
    ] {
        // An orphan's pod slice: with the wrong driver it would be invisible.
        let node = Node::new(&[SLICE], running.clone(), driver);
        let (json, table) = node.plan(DriverName::Cgroupfs).await;
        let line = cgroups_line(&table);
        assert!(line.contains("FAILED: --cgroup-driver=cgroupfs"), "{table}");
        assert!(line.contains(said_by), "{said_by:?} in {table}");
        assert!(!line.contains("ok"), "{table}");
        assert!(
            table.contains("cgroup driver: not decided (the cgroups source failed"),
            "{table}"
        );
        assert_eq!(json["sources_ok"], false);
        assert!(
            json["actions"].as_array().is_none_or(Vec::is_empty),
            "{json}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_cgroup_root_while_pods_run_fails_the_source_instead_of_0_items() {
    let running = vec![
        sandbox("live-1", PodSandboxState::SandboxReady),
        sandbox("live-2", PodSandboxState::SandboxReady),
    ];
    // No kubepods anywhere (a wrong --cgroup-root mount, say); an orphan's pod dir waits to go.
    let node = Node::new(&[], running, None);
    fs::create_dir_all(node.tmp.path().join("kubelet/pods/orphan-1/containers")).expect("mkdir");
    for flag in [DriverName::Auto, DriverName::Systemd] {
        let (json, table) = node.plan(flag).await;
        let line = cgroups_line(&table);
        assert!(line.contains("FAILED: no pod cgroup root found"), "{table}");
        assert!(
            line.contains("while the runtime reports 2 running pod sandbox(es)"),
            "{table}"
        );
        let expected = match flag {
            DriverName::Systemd => "no kubepods.slice in any hierarchy",
            _ => "neither kubepods (cgroupfs) nor kubepods.slice (systemd)",
        };
        assert!(line.contains(expected), "{expected:?} in {table}");
        assert_eq!(json["sources_ok"], false, "{json}");
        assert!(
            json["actions"].as_array().is_none_or(Vec::is_empty),
            "{json}"
        );
        // The decision is still shown: it is not what failed.
        assert!(json["cgroup_driver"]["evidence"].is_array(), "{json}");
    }

    // No running pod (NOTREADY ones only): nothing can be hidden, so an empty scan is the truth.
    let idle = Node::new(
        &[],
        vec![sandbox("old-1", PodSandboxState::SandboxNotready)],
        None,
    );
    let (json, table) = idle.plan(DriverName::Auto).await;
    assert!(cgroups_line(&table).ends_with("ok, 0 items"), "{table}");
    assert!(
        table.contains("cgroup driver: not decided, cgroup v2"),
        "{table}"
    );
    assert_eq!(json["sources_ok"], true, "{json}");
}
