//! cgroup v2 as a first-class target, on this machine's real cgroup2 mount with real processes:
//! the test hierarchy is the layout's root, so the housekeeper sees a pure v2 node
//! (support/real_cgroups.rs). Destroy uses `cgroup.kill`, waits for `cgroup.events` to say
//! `populated 0`, then removes the tree; nothing else is touched. The files v2 adds
//! (`cgroup.kill`, `cgroup.events`, `cpu.weight`/`cpu.max`, pressure files, `memory.events`) are
//! also checked byte for byte on fake trees, where every one of them can be made to exist.

#[path = "support/real_cgroups.rs"]
mod real_cgroups;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podward_housekeeper::node::cgroup::{
    CgroupDriver, CgroupError, CgroupLayout, CgroupVersion, HierarchyKind, PodCgroup, Qos, destroy,
    kill_processes, reduce_cpu, scan_pod_cgroups,
};
use podward_housekeeper::node::fs_error::FsError;
use real_cgroups::TestCgroups;

fn find(pods: &[PodCgroup], uid: &str) -> PodCgroup {
    pods.iter()
        .find(|p| p.uid == uid)
        .cloned()
        .unwrap_or_else(|| panic!("pod {uid} not found in {pods:?}"))
}

#[test]
fn v2_orphan_is_killed_through_cgroup_kill_and_removed_once_unpopulated() {
    let mut t = TestCgroups::v2();
    let (u1, u2) = (
        "11111111-aaaa-4000-8000-000000000001",
        "22222222-bbbb-4000-8000-000000000002",
    );
    let b1 = format!("kubepods/burstable/pod{u1}");
    t.mkcg(&format!("{b1}/c1/nested"));
    t.mkcg(&format!("{b1}/c2"));
    let pids = [
        t.spawn_in(&b1),
        t.spawn_in(&format!("{b1}/c1/nested")),
        t.spawn_in(&format!("{b1}/c2")),
    ];
    let g2 = format!("kubepods/pod{u2}/c");
    t.mkcg(&g2);
    let other = t.spawn_in(&g2);
    t.mkcg("kubepods/burstable/podx-pod-y");
    t.mkcg("kubepods/besteffort");

    let layout = t.layout(CgroupDriver::Cgroupfs);
    assert_eq!(layout.version(), CgroupVersion::V2);
    assert_eq!(
        layout
            .hierarchies
            .iter()
            .map(|h| (&h.kind, h.path.as_path()))
            .collect::<Vec<_>>(),
        [(&HierarchyKind::V2, t.root())]
    );
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let found: Vec<_> = pods.iter().map(|p| (p.uid.as_str(), p.qos)).collect();
    assert_eq!(found, [(u1, Qos::Burstable), (u2, Qos::Guaranteed)]);
    let events = t.root().join(&b1).join("cgroup.events");
    assert!(
        fs::read_to_string(&events)
            .expect("cgroup.events")
            .contains("populated 1")
    );
    assert!(
        t.root().join(&b1).join("cgroup.kill").exists(),
        "kernel ≥ 5.14"
    );

    let started = Instant::now();
    let report = destroy(&layout, &find(&pods, u1)).expect("destroy");
    eprintln!("v2 destroy of a 3-process pod: {:?}", started.elapsed());
    for pid in pids {
        assert!(report.killed.contains(&pid), "{pid} in {report:?}");
        assert_eq!(t.wait_signal(pid), Some(9), "{pid} died of SIGKILL");
    }
    let at = |rel: String| {
        report
            .removed
            .iter()
            .position(|p| *p == t.root().join(&rel))
            .unwrap_or_else(|| panic!("{rel} not removed: {report:?}"))
    };
    let (nested, c1, c2, pod) = (
        at(format!("{b1}/c1/nested")),
        at(format!("{b1}/c1")),
        at(format!("{b1}/c2")),
        at(b1.clone()),
    );
    assert!(
        nested < c1 && c1 < pod && c2 < pod,
        "children first: {report:?}"
    );
    assert_eq!(report.removed.len(), 4, "{report:?}");
    assert!(t.exists_anywhere(&b1).is_empty());

    // What must stay: the other pod and its process, the parents, a name that is not a pod.
    assert!(t.alive(other));
    assert_eq!(t.exists_anywhere(&g2).len(), 1);
    assert!(
        fs::read_to_string(t.root().join(&g2).join("cgroup.events"))
            .expect("events")
            .contains("populated 1")
    );
    for keep in [
        "kubepods/burstable/podx-pod-y",
        "kubepods/burstable",
        "kubepods/besteffort",
        "kubepods",
    ] {
        assert_eq!(t.exists_anywhere(keep).len(), 1, "{keep} was removed");
    }
    let after: Vec<_> = scan_pod_cgroups(&layout)
        .expect("rescan")
        .into_iter()
        .map(|p| p.uid)
        .collect();
    assert_eq!(after, [u2]);
}

#[test]
fn v2_systemd_names_and_a_child_cgroup_frozen_by_its_own_freeze_still_die() {
    let mut t = TestCgroups::v2();
    let slice = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod44444444_dddd_4000_8000_000000000004.slice";
    let scope = format!("{slice}/cri-containerd-01.scope");
    t.mkcg(&scope);
    let pid = t.spawn_in(&scope);
    // v2's freezer lets SIGKILL through (unlike v1's): a frozen container does not block the kill.
    fs::write(t.root().join(&scope).join("cgroup.freeze"), "1").expect("freeze");
    let layout = t.layout(CgroupDriver::Systemd);
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let report = destroy(
        &layout,
        &find(&pods, "44444444-dddd-4000-8000-000000000004"),
    )
    .expect("destroy");
    assert_eq!(t.wait_signal(pid), Some(9));
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert!(t.exists_anywhere(slice).is_empty());
    assert_eq!(
        t.exists_anywhere("kubepods.slice/kubepods-besteffort.slice")
            .len(),
        1
    );
}

#[test]
fn v2_reduce_cpu_is_cpu_weight_1_and_kills_nothing() {
    let mut t = TestCgroups::v2();
    let rel = "kubepods/burstable/pod33333333-cccc-4000-8000-000000000003";
    let controllers = fs::read_to_string(t.root().join("cgroup.controllers")).expect("read");
    let has_cpu = controllers.split_whitespace().any(|c| c == "cpu");
    if has_cpu {
        for parent in ["", "kubepods", "kubepods/burstable"] {
            t.mkcg(parent);
            fs::write(t.root().join(parent).join("cgroup.subtree_control"), "+cpu")
                .expect("enable cpu");
        }
    }
    t.mkcg(rel);
    let pid = t.spawn_in(rel);
    let layout = t.layout(CgroupDriver::Cgroupfs);
    let pod = scan_pod_cgroups(&layout).expect("scan").remove(0);
    let dir = t.root().join(rel);
    if has_cpu {
        let max_before = fs::read_to_string(dir.join("cpu.max")).expect("cpu.max");
        reduce_cpu(&layout, &pod).expect("reduce");
        assert_eq!(
            fs::read_to_string(dir.join("cpu.weight"))
                .expect("weight")
                .trim(),
            "1"
        );
        assert_eq!(
            fs::read_to_string(dir.join("cpu.max")).expect("cpu.max"),
            max_before,
            "kubelet's ReduceCPULimits sets only the weight"
        );
    } else {
        // This machine binds cpu to v1, so its v2 mount has no cpu controller: nothing to lower,
        // and that is an error rather than a silent success (cpu.weight/cpu.max are covered on
        // a fake tree below).
        match reduce_cpu(&layout, &pod) {
            Err(CgroupError::NoCpuController(name)) => assert_eq!(name, pod.name),
            other => panic!("expected NoCpuController, got {other:?}"),
        }
        assert!(!dir.join("cpu.weight").exists());
    }
    assert!(t.alive(pid), "reduce_cpu kills nothing");
    assert_eq!(t.exists_anywhere(rel).len(), 1, "and removes nothing");
}

// ---- the v2 files, byte for byte, on fake trees ----

/// A pure v2 fake tree with one pod cgroup holding every file a v2 pod cgroup can have.
fn fake_v2_pod(events: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::write(
        tmp.path().join("cgroup.controllers"),
        "cpu memory pids io\n",
    )
    .expect("write");
    let pod = tmp
        .path()
        .join("kubepods/burstable/pod33333333-cccc-4000-8000-000000000003");
    fs::create_dir_all(&pod).expect("mkdir");
    for (file, content) in [
        ("cgroup.procs", ""),
        ("cgroup.events", events),
        ("cgroup.kill", ""),
        ("cgroup.freeze", "0\n"),
        ("cpu.weight", "100\n"),
        ("cpu.max", "50000 100000\n"),
        (
            "cpu.pressure",
            "some avg10=1.00 avg60=0.50 avg300=0.10 total=1234\n",
        ),
        (
            "memory.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        ),
        (
            "io.pressure",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        ),
        ("cgroup.pressure", "1\n"),
        ("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
        ("memory.max", "104857600\n"),
    ] {
        fs::write(pod.join(file), content).expect("write");
    }
    (tmp, pod)
}

fn contents(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read_to_string(e.path()).expect("read"),
            )
        })
        .collect()
}

fn fake_layout(root: &Path) -> (CgroupLayout, PodCgroup) {
    let mut layout = CgroupLayout::detect(root, CgroupDriver::Cgroupfs, "/").expect("detect");
    layout.kill_wait = Duration::from_millis(200);
    let pod = scan_pod_cgroups(&layout).expect("scan").remove(0);
    (layout, pod)
}

#[test]
fn v2_kill_and_reduce_write_only_cgroup_kill_and_cpu_weight() {
    let (tmp, pod_dir) = fake_v2_pod("populated 0\nfrozen 0\n");
    let (layout, pod) = fake_layout(tmp.path());
    let before = contents(&pod_dir);

    assert!(kill_processes(&layout, &pod).expect("kill").is_empty());
    reduce_cpu(&layout, &pod).expect("reduce");

    let mut expected = before.clone();
    expected.insert("cgroup.kill".into(), "1".into());
    expected.insert("cpu.weight".into(), "1".into());
    assert_eq!(
        contents(&pod_dir),
        expected,
        "only cgroup.kill and cpu.weight change: cpu.max, pressure files, memory.events and the \
         rest are untouched"
    );
}

#[test]
fn v2_destroy_waits_for_populated_0_before_any_rmdir() {
    // cgroup.procs is empty but the kernel still says populated 1 (e.g. a task still exiting):
    // nothing may be removed.
    let (tmp, pod_dir) = fake_v2_pod("populated 1\nfrozen 0\n");
    let (layout, pod) = fake_layout(tmp.path());
    let child = pod_dir.join("c1");
    fs::create_dir(&child).expect("mkdir");
    fs::write(child.join("cgroup.procs"), "").expect("write");
    match destroy(&layout, &pod) {
        Err(CgroupError::Busy { remaining, .. }) => assert!(remaining.is_empty()),
        other => panic!("expected Busy while populated 1, got {other:?}"),
    }
    assert!(child.exists() && pod_dir.exists(), "nothing removed");

    fs::write(pod_dir.join("cgroup.events"), "populated 0\nfrozen 0\n").expect("write");
    // Now it may go (a fake tree's files make rmdir fail: only the emptied child goes).
    fs::remove_file(child.join("cgroup.procs")).expect("rm");
    let err = destroy(&layout, &pod).expect_err("the pod dir still holds files");
    assert!(
        matches!(err, CgroupError::Io(FsError { op: "rmdir", .. })),
        "{err:?}"
    );
    assert!(
        !child.exists(),
        "the child went once the kernel said populated 0"
    );
}
