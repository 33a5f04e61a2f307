//! Pod cgroups on real kernel hierarchies with real processes: the hybrid set (v1 `cpu`, `memory`,
//! `pids`, `freezer` beside the v2 `unified` mount) of the development machines, each test in its
//! own private test hierarchy (support/real_cgroups.rs). Pure cgroup v2 is in cgroup_v2_real.rs.

#[path = "support/real_cgroups.rs"]
mod real_cgroups;

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use podward_housekeeper::node::cgroup::{
    CgroupDriver, CgroupError, PodCgroup, Qos, destroy, reduce_cpu, scan_pod_cgroups,
};
use real_cgroups::TestCgroups;

fn find<'a>(pods: &'a [PodCgroup], uid: &str) -> &'a PodCgroup {
    pods.iter()
        .find(|p| p.uid == uid)
        .unwrap_or_else(|| panic!("pod {uid} not found in {pods:?}"))
}

#[test]
fn orphan_is_killed_and_removed_in_every_hierarchy() {
    let mut t = TestCgroups::hybrid();
    let (u1, u2, u3) = (
        "11111111-aaaa-4000-8000-000000000001",
        "22222222-bbbb-4000-8000-000000000002",
        "33333333-cccc-4000-8000-000000000003",
    );
    let b1 = format!("kubepods/burstable/pod{u1}");
    t.mkcg(&format!("{b1}/c1/nested"));
    t.mkcg(&format!("{b1}/c2"));
    let p_pod = t.spawn_in(&b1);
    let p_c1 = t.spawn_in(&format!("{b1}/c1/nested"));
    let p_c2 = t.spawn_in(&format!("{b1}/c2"));
    let g2 = format!("kubepods/pod{u2}");
    t.mkcg(&format!("{g2}/c"));
    let p_other = t.spawn_in(&format!("{g2}/c"));
    t.mkcg(&format!("kubepods/besteffort/pod{u3}"));
    // Not pods (kubelet's TestIsCgroupPod): a UID containing "pod", a system cgroup.
    t.mkcg("kubepods/burstable/podx-pod-y");
    t.mkcg("kubepods/system");

    let layout = t.layout(CgroupDriver::Cgroupfs);
    assert_eq!(layout.hierarchies.len(), 5, "{:?}", layout.hierarchies);
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let uids: Vec<_> = pods
        .iter()
        .map(|p| (p.uid.as_str(), p.qos, p.paths.len()))
        .collect();
    assert_eq!(
        uids,
        [
            (u1, Qos::Burstable, 5),
            (u2, Qos::Guaranteed, 5),
            (u3, Qos::BestEffort, 5)
        ]
    );

    let started = Instant::now();
    let report = destroy(&layout, find(&pods, u1)).expect("destroy");
    eprintln!(
        "destroy of a 3-process pod in 5 hierarchies: {:?}",
        started.elapsed()
    );
    for pid in [p_pod, p_c1, p_c2] {
        assert!(
            report.killed.contains(&pid),
            "{pid} not in {:?}",
            report.killed
        );
        assert_eq!(t.wait_signal(pid), Some(9), "{pid} died of SIGKILL");
    }
    assert!(report.d_state.is_empty());
    assert_eq!(
        report.removed.len(),
        4 * 5,
        "pod, c1, c1/nested, c2 in 5 hierarchies: {:?}",
        report.removed
    );
    assert_eq!(t.exists_anywhere(&b1), Vec::<String>::new());
    // The other pods and the parents are untouched.
    assert!(t.alive(p_other));
    assert_eq!(t.exists_anywhere(&format!("{g2}/c")).len(), 5);
    assert_eq!(t.exists_anywhere("kubepods/burstable/podx-pod-y").len(), 5);
    assert_eq!(t.exists_anywhere("kubepods/burstable").len(), 5);
    let after: Vec<_> = scan_pod_cgroups(&layout)
        .expect("rescan")
        .into_iter()
        .map(|p| p.uid)
        .collect();
    assert_eq!(after, [u2, u3]);
    // Destroying again finds nothing to do.
    let again = destroy(&layout, find(&pods, u1)).expect("destroy again");
    assert!(again.removed.is_empty() && again.killed.is_empty());
}

#[test]
fn destroy_refuses_paths_that_are_not_this_pod() {
    let t = TestCgroups::hybrid();
    let rel = "kubepods/burstable/pod00000000-0000-4000-8000-000000000001";
    t.mkcg(rel);
    let layout = t.layout(CgroupDriver::Cgroupfs);
    let mut pod = scan_pod_cgroups(&layout).expect("scan").remove(0);
    pod.paths.push(t.root().join("memory/kubepods/burstable"));
    assert!(matches!(
        destroy(&layout, &pod),
        Err(CgroupError::NotAPodCgroup(_))
    ));
    pod.paths = vec![PathBuf::from("/elsewhere").join(rel)];
    assert!(matches!(
        destroy(&layout, &pod),
        Err(CgroupError::NotAPodCgroup(_))
    ));
    assert_eq!(t.exists_anywhere(rel).len(), 5, "nothing removed");
}

#[test]
fn reduce_cpu_sets_minimum_shares() {
    let mut t = TestCgroups::hybrid();
    let rel = "kubepods/burstable/pod00000000-0000-4000-8000-000000000001";
    t.mkcg(rel);
    let pid = t.spawn_in(rel);
    let layout = t.layout(CgroupDriver::Cgroupfs);
    let pod = scan_pod_cgroups(&layout).expect("scan").remove(0);
    let shares = t.root().join("cpu").join(rel).join("cpu.shares");
    assert_eq!(fs::read_to_string(&shares).expect("shares").trim(), "1024");
    reduce_cpu(&layout, &pod).expect("reduce");
    assert_eq!(fs::read_to_string(&shares).expect("shares").trim(), "2");
    // On this hybrid machine every controller is bound to v1, so the v2 mount has no cpu controller
    // and no cpu.weight to write (covered on a fake tree in cgroup_names.rs).
    let v2 = t.root().join("unified").join(rel);
    if fs::read_to_string(t.root().join("unified/cgroup.controllers"))
        .expect("controllers")
        .contains("cpu")
    {
        assert_eq!(
            fs::read_to_string(v2.join("cpu.weight"))
                .expect("weight")
                .trim(),
            "1"
        );
    } else {
        assert!(!v2.join("cpu.weight").exists());
    }
    assert!(t.alive(pid), "reduce_cpu kills nothing");
    assert_eq!(t.exists_anywhere(rel).len(), 5, "and removes nothing");
}

#[test]
fn d_state_process_makes_destroy_busy_without_spinning() {
    let mut t = TestCgroups::hybrid();
    let pod_rel = "kubepods/besteffort/pod00000000-0000-4000-8000-00000000000d";
    let rel = format!("{pod_rel}/c");
    t.mkcg(&rel);
    let pid = t.spawn_in(&rel);
    // A task frozen by its own (child) freezer cannot die, and the pod-level thaw does not reach
    // it: the kernel reports it in D state, like a task stuck in I/O.
    let own_freezer = t.root().join("freezer").join(&rel).join("freezer.state");
    fs::write(&own_freezer, "FROZEN").expect("freeze child");
    let mut layout = t.layout(CgroupDriver::Cgroupfs);
    layout.kill_wait = Duration::from_millis(300);
    let pod = scan_pod_cgroups(&layout).expect("scan").remove(0);

    let started = Instant::now();
    match destroy(&layout, &pod) {
        Err(CgroupError::Busy {
            d_state,
            remaining,
            killed,
            ..
        }) => {
            assert_eq!(remaining, [pid]);
            assert_eq!(d_state, [pid]);
            assert!(killed.contains(&pid));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "bounded wait, took {took:?}");
    assert_eq!(
        t.exists_anywhere(&rel).len(),
        5,
        "nothing removed while a process remains"
    );

    // Once the task can die, the next attempt completes.
    fs::write(&own_freezer, "THAWED").expect("thaw");
    layout.kill_wait = Duration::from_secs(5);
    let report = destroy(&layout, &pod).expect("destroy after thaw");
    assert_eq!(t.wait_signal(pid), Some(9));
    assert_eq!(report.removed.len(), 10);
    assert_eq!(t.exists_anywhere(pod_rel), Vec::<String>::new());
}

#[test]
fn systemd_names_on_real_hierarchy() {
    let mut t = TestCgroups::hybrid();
    // Pod UIDs in kubelet's shape; systemd names write their `-` as `_`.
    let (a1, c3, e5) = (
        "000000a1-0000-4000-8000-0000000000b2",
        "000000c3-0000-4000-8000-0000000000d4",
        "000000e5-0000-4000-8000-0000000000f6",
    );
    let sd_ = |uid: &str| uid.replace('-', "_");
    let burstable = format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        sd_(a1)
    );
    t.mkcg(&format!("{burstable}/cri-containerd-0123.scope"));
    t.mkcg(&format!("kubepods.slice/kubepods-pod{}.slice", sd_(c3)));
    t.mkcg(&format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        sd_(e5)
    ));
    t.mkcg("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx_pod_y.slice");
    let pid = t.spawn_in(&format!("{burstable}/cri-containerd-0123.scope"));
    let layout = t.layout(CgroupDriver::Systemd);
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let uids: Vec<_> = pods.iter().map(|p| (p.uid.as_str(), p.qos)).collect();
    assert_eq!(
        uids,
        [
            (a1, Qos::Burstable),
            (c3, Qos::Guaranteed),
            (e5, Qos::BestEffort)
        ]
    );
    assert!(
        scan_pod_cgroups(&t.layout(CgroupDriver::Cgroupfs))
            .expect("cgroupfs scan")
            .is_empty()
    );
    let report = destroy(&layout, find(&pods, a1)).expect("destroy");
    assert_eq!(t.wait_signal(pid), Some(9));
    assert_eq!(report.removed.len(), 10);
    assert_eq!(t.exists_anywhere(&burstable), Vec::<String>::new());
    assert_eq!(
        t.exists_anywhere(&format!("kubepods.slice/kubepods-pod{}.slice", sd_(c3)))
            .len(),
        5
    );
}
