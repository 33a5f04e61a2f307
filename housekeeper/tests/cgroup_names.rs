//! Cgroup naming and scanning on fake trees (temp dirs shaped like cgroupfs): both drivers, all QoS
//! classes, `--cgroup-root`, kubelet's TestIsCgroupPod cases, dedupe across hierarchies, and the
//! "a read error fails the scan" rule.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use podward_housekeeper::node::cgroup::{
    CgroupDriver, CgroupError, CgroupLayout, HierarchyKind, PodCgroup, Qos, parse_pod_cgroup_name,
    reduce_cpu, scan_cgroups, scan_pod_cgroups,
};

/// A hybrid v1 + v2 fake tree like this machine's: `cpu,cpuacct`, `memory`, `systemd`, `unified`,
/// plus a `cpu -> cpu,cpuacct` symlink that detection must skip.
fn hybrid_root() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for v1 in ["cpu,cpuacct", "memory", "pids", "freezer", "systemd"] {
        let d = tmp.path().join(v1);
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(d.join("cgroup.procs"), "").expect("procs");
    }
    let unified = tmp.path().join("unified");
    fs::create_dir_all(&unified).expect("mkdir");
    fs::write(unified.join("cgroup.controllers"), "").expect("controllers");
    fs::write(unified.join("cgroup.procs"), "").expect("procs");
    std::os::unix::fs::symlink("cpu,cpuacct", tmp.path().join("cpu")).expect("symlink");
    tmp
}

fn mkcg(root: &Path, hier: &str, rel: &str) -> PathBuf {
    let p = root.join(hier).join(rel);
    fs::create_dir_all(&p).expect("mkdir cgroup");
    p
}

#[test]
fn detect_hybrid_and_pure_v2() {
    let tmp = hybrid_root();
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    let names: Vec<_> = layout
        .hierarchies
        .iter()
        .map(|h| h.path.file_name().expect("name").to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "cpu,cpuacct",
            "freezer",
            "memory",
            "pids",
            "systemd",
            "unified"
        ]
    );
    assert!(
        layout
            .hierarchies
            .iter()
            .any(|h| h.has_v1_controller("cpuacct"))
    );
    assert_eq!(
        layout.hierarchies.last().expect("unified").kind,
        HierarchyKind::V2
    );
    assert_eq!(
        layout
            .hierarchies
            .iter()
            .find(|h| h.path.ends_with("systemd"))
            .expect("systemd")
            .kind,
        HierarchyKind::V1 {
            controllers: vec![]
        }
    );

    let v2 = tempfile::tempdir().expect("tempdir");
    fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids").expect("controllers");
    fs::create_dir(v2.path().join("kubepods")).expect("mkdir");
    let layout = CgroupLayout::detect(v2.path(), CgroupDriver::Systemd, "/").expect("detect v2");
    assert_eq!(layout.hierarchies.len(), 1);
    assert_eq!(layout.hierarchies[0].kind, HierarchyKind::V2);

    let empty = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        CgroupLayout::detect(empty.path(), CgroupDriver::Cgroupfs, "/"),
        Err(CgroupError::NoHierarchy(_))
    ));
}

#[test]
fn names_both_drivers_all_qos_and_cgroup_root() {
    let tmp = hybrid_root();
    let uid = "1234-abcd-5678-efgh";
    let fs_layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    assert_eq!(
        fs_layout.pod_cgroup_name(Qos::Guaranteed, uid),
        format!("kubepods/pod{uid}")
    );
    assert_eq!(
        fs_layout.pod_cgroup_name(Qos::Burstable, uid),
        format!("kubepods/burstable/pod{uid}")
    );
    assert_eq!(
        fs_layout.pod_cgroup_name(Qos::BestEffort, uid),
        format!("kubepods/besteffort/pod{uid}")
    );
    let sd = CgroupLayout::detect(tmp.path(), CgroupDriver::Systemd, "/").expect("detect");
    assert_eq!(
        sd.pod_cgroup_name(Qos::Guaranteed, uid),
        "kubepods.slice/kubepods-pod1234_abcd_5678_efgh.slice"
    );
    // The example in kubelet's ToSystemd comment.
    assert_eq!(
        sd.pod_cgroup_name(Qos::Burstable, uid),
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
    );
    assert_eq!(
        sd.pod_cgroup_name(Qos::BestEffort, uid),
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678_efgh.slice"
    );
    // --cgroup-root: cgroupfs prefixes the path; systemd folds it into the slice names, `-`
    // escaped.
    let fs_root = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/podward-test/x")
        .expect("detect");
    assert_eq!(
        fs_root.qos_dir(Qos::Burstable),
        "podward-test/x/kubepods/burstable"
    );
    let sd_root =
        CgroupLayout::detect(tmp.path(), CgroupDriver::Systemd, "/podward-test").expect("detect");
    assert_eq!(
        sd_root.qos_dir(Qos::BestEffort),
        "podward_test.slice/podward_test-kubepods.slice/podward_test-kubepods-besteffort.slice"
    );
    // A root given as a systemd slice parses like kubelet's ParseSystemdToCgroupName.
    let sd_slice = CgroupLayout::detect(
        tmp.path(),
        CgroupDriver::Systemd,
        "/foo.slice/foo-bar.slice",
    )
    .expect("slice");
    assert_eq!(
        sd_slice.qos_dir(Qos::Guaranteed),
        "foo.slice/foo-bar.slice/foo-bar-kubepods.slice"
    );
    for bad in ["relative", "/a/../b", "/./a"] {
        assert!(
            matches!(
                CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, bad),
                Err(CgroupError::InvalidCgroupRoot(..))
            ),
            "{bad} must be rejected"
        );
    }
    assert!(CgroupLayout::detect(tmp.path(), CgroupDriver::Systemd, "/a_b").is_err());
}

#[test]
fn is_cgroup_pod_cases() {
    use CgroupDriver::{Cgroupfs, Systemd};
    let uid = "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b";
    assert_eq!(
        parse_pod_cgroup_name(Cgroupfs, &format!("pod{uid}")).as_deref(),
        Some(uid)
    );
    assert_eq!(
        parse_pod_cgroup_name(
            Systemd,
            &format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"))
        )
        .as_deref(),
        Some(uid)
    );
    // Static pod UID: a 32-hex config hash.
    assert_eq!(
        parse_pod_cgroup_name(Cgroupfs, "pod0123456789abcdef0123456789abcdef").as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    // kubelet TestIsCgroupPod: a UID containing "pod", container scopes, system cgroups are not
    // pods.
    for not_pod in [
        "podabc-pod-def",
        "podpod",
        "system",
        "kubelet",
        "burstable",
        "besteffort",
        "pod",
        "foopod123",
        "container.scope",
        "cri-containerd-abc.scope",
        ".",
    ] {
        assert_eq!(
            parse_pod_cgroup_name(Cgroupfs, not_pod),
            None,
            "cgroupfs {not_pod}"
        );
    }
    for not_pod in [
        "kubepods-burstable.slice",
        "kubepods-besteffort.slice",
        "system.slice",
        "kubepods-podabc_pod_x.slice",
        "kubepods-pod.slice",
    ] {
        assert_eq!(
            parse_pod_cgroup_name(Systemd, not_pod),
            None,
            "systemd {not_pod}"
        );
    }
}

#[test]
fn scan_finds_all_qos_in_both_drivers_and_dedupes() {
    let tmp = hybrid_root();
    let r = tmp.path();
    // Pod UIDs in kubelet's shape (anything else is never a pod cgroup).
    let (g, b, e) = (
        "0000000f-0000-4000-8000-000000000001",
        "0000000b-0000-4000-8000-000000000002",
        "0000000e-0000-4000-8000-000000000003",
    );
    // cgroupfs: guaranteed in cpu + unified, burstable only in memory, besteffort in pids; noise
    // next to them.
    mkcg(r, "cpu,cpuacct", &format!("kubepods/pod{g}/ctr1"));
    mkcg(r, "unified", &format!("kubepods/pod{g}"));
    mkcg(r, "memory", &format!("kubepods/burstable/pod{b}/ctr"));
    mkcg(r, "pids", &format!("kubepods/besteffort/pod{e}"));
    mkcg(r, "cpu,cpuacct", "kubepods/burstable");
    mkcg(r, "cpu,cpuacct", "kubepods/besteffort");
    mkcg(r, "memory", "kubepods/burstable/podx-pod-y");
    mkcg(r, "memory", "kubepods/system");
    fs::write(r.join("memory/kubepods/burstable/podfile-4"), "").expect("file is not a cgroup");
    let layout = CgroupLayout::detect(r, CgroupDriver::Cgroupfs, "/").expect("detect");
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let uids: Vec<_> = pods.iter().map(|p| (p.uid.as_str(), p.qos)).collect();
    assert_eq!(
        uids,
        [
            (b, Qos::Burstable),
            (e, Qos::BestEffort),
            (g, Qos::Guaranteed)
        ]
    );
    let gp = &pods[2];
    assert_eq!(gp.name, format!("kubepods/pod{g}"));
    let mut paths = gp.paths.clone();
    paths.sort();
    assert_eq!(
        paths,
        [
            r.join(format!("cpu,cpuacct/kubepods/pod{g}")),
            r.join(format!("unified/kubepods/pod{g}"))
        ]
    );

    // systemd naming in the same tree is invisible to the cgroupfs layout and vice versa.
    let (aa, cc, ee) = (
        "000000aa-0000-4000-8000-0000000000bb",
        "000000cc-0000-4000-8000-0000000000dd",
        "000000ee-0000-4000-8000-0000000000ff",
    );
    let sd_ = |uid: &str| uid.replace('-', "_");
    mkcg(
        r,
        "unified",
        &format!(
            "kubepods.slice/kubepods-pod{}.slice/cri-containerd-1.scope",
            sd_(aa)
        ),
    );
    mkcg(
        r,
        "memory",
        &format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            sd_(cc)
        ),
    );
    for h in ["systemd", "unified"] {
        mkcg(
            r,
            h,
            &format!(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
                sd_(ee)
            ),
        );
    }
    let sd = CgroupLayout::detect(r, CgroupDriver::Systemd, "/").expect("detect");
    let pods: Vec<PodCgroup> = scan_pod_cgroups(&sd).expect("scan systemd");
    let uids: Vec<_> = pods
        .iter()
        .map(|p| (p.uid.as_str(), p.qos, p.paths.len()))
        .collect();
    assert_eq!(
        uids,
        [
            (aa, Qos::Guaranteed, 1),
            (cc, Qos::Burstable, 1),
            (ee, Qos::BestEffort, 2)
        ]
    );
    assert_eq!(
        pods[1].name,
        format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            sd_(cc)
        )
    );
    assert_eq!(scan_pod_cgroups(&layout).expect("scan").len(), 3);
}

#[test]
fn scan_read_error_fails_the_scan() {
    let tmp = hybrid_root();
    // A QoS parent that is not a directory cannot be listed: ENOTDIR, not NotFound.
    mkcg(tmp.path(), "memory", "kubepods");
    fs::write(tmp.path().join("memory/kubepods/burstable"), "").expect("file");
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    assert!(matches!(scan_pod_cgroups(&layout), Err(CgroupError::Io(_))));
    // No kubepods at all is not an error: nothing to find.
    let tmp = hybrid_root();
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    assert_eq!(scan_pod_cgroups(&layout).expect("scan"), []);
}

#[test]
fn reduce_cpu_writes_shares_and_weight_on_fake_tree() {
    let tmp = hybrid_root();
    let pod = "kubepods/burstable/pod00000000-0000-4000-8000-000000000001";
    let cpu = mkcg(tmp.path(), "cpu,cpuacct", pod);
    let mem = mkcg(tmp.path(), "memory", pod);
    let v2 = mkcg(tmp.path(), "unified", pod);
    fs::write(cpu.join("cpu.shares"), "1024").expect("shares");
    fs::write(v2.join("cpu.weight"), "100").expect("weight");
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    let pods = scan_pod_cgroups(&layout).expect("scan");
    reduce_cpu(&layout, &pods[0]).expect("reduce");
    assert_eq!(
        fs::read_to_string(cpu.join("cpu.shares")).expect("read"),
        "2"
    );
    assert_eq!(
        fs::read_to_string(v2.join("cpu.weight")).expect("read"),
        "1"
    );
    // Never creates files in other controllers.
    assert!(!mem.join("cpu.shares").exists());
    // Without any cpu file it says so instead of pretending.
    fs::remove_file(cpu.join("cpu.shares")).expect("rm");
    fs::remove_file(v2.join("cpu.weight")).expect("rm");
    assert!(matches!(
        reduce_cpu(&layout, &pods[0]),
        Err(CgroupError::NoCpuController(_))
    ));
}

#[test]
fn reduce_cpu_writes_nothing_when_pointed_at_a_qos_parent_or_another_pod() {
    let tmp = hybrid_root();
    let uid = "00000000-0000-4000-8000-000000000001";
    let other = "00000000-0000-4000-8000-000000000002";
    let cpu = mkcg(
        tmp.path(),
        "cpu,cpuacct",
        &format!("kubepods/burstable/pod{uid}"),
    );
    let parent = tmp.path().join("cpu,cpuacct/kubepods/burstable");
    let sibling = mkcg(
        tmp.path(),
        "cpu,cpuacct",
        &format!("kubepods/burstable/pod{other}"),
    );
    for dir in [&cpu, &parent, &sibling] {
        fs::write(dir.join("cpu.shares"), "1024").expect("shares");
    }
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    let mut pod = scan_pod_cgroups(&layout)
        .expect("scan")
        .into_iter()
        .find(|p| p.uid == uid)
        .expect("pod");
    for wrong in [parent.clone(), sibling.clone()] {
        pod.paths = vec![wrong];
        assert!(matches!(
            reduce_cpu(&layout, &pod),
            Err(CgroupError::NotAPodCgroup(_))
        ));
    }
    for dir in [&cpu, &parent, &sibling] {
        assert_eq!(
            fs::read_to_string(dir.join("cpu.shares")).expect("read"),
            "1024",
            "{} untouched",
            dir.display()
        );
    }
}

#[test]
fn scan_of_10k_pod_cgroups_finds_each() {
    // Speed is the housekeeper_pass benchmark's to judge (docs/benchmarks.md), not a test's: on a
    // shared machine a timed assertion fails for the load, not the code. This proves the scale.

    let tmp = hybrid_root();
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    let qos = [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort];
    for i in 0..10_000 {
        let uid = format!("{i:08x}-0000-4000-8000-000000000000");
        let rel = layout.pod_cgroup_name(qos[i % 3], &uid);
        mkcg(tmp.path(), "memory", &rel);
    }
    let start = Instant::now();
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let took = start.elapsed();
    assert_eq!(pods.len(), 10_000);
    eprintln!(
        "scan of 10,000 pod cgroups over {} hierarchies: {took:?}",
        layout.hierarchies.len()
    );
}

#[test]
fn process_state_from_fake_and_real_proc() {
    use podward_housekeeper::node::procs::process_state;
    let tmp = tempfile::tempdir().expect("tempdir");
    let write = |pid: i32, stat: &str| {
        fs::create_dir_all(tmp.path().join(pid.to_string())).expect("mkdir");
        fs::write(tmp.path().join(format!("{pid}/stat")), stat).expect("stat");
    };
    let rest = "1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
    write(10, &format!("10 (runc:[2:INIT]) D {rest}\n"));
    // comm with spaces and parens must not confuse the parser.
    write(11, &format!("11 (a) b (c) S {rest}\n"));
    write(12, "garbage");
    assert_eq!(process_state(tmp.path(), 10), Some('D'));
    assert_eq!(process_state(tmp.path(), 11), Some('S'));
    assert_eq!(process_state(tmp.path(), 12), None);
    assert_eq!(process_state(tmp.path(), 13), None);
    assert_eq!(process_state(tmp.path(), 0), None);
    assert_eq!(process_state(tmp.path(), -5), None);
    let me = i32::try_from(std::process::id()).expect("pid");
    assert!(matches!(
        process_state(Path::new("/proc"), me),
        Some('R' | 'S')
    ));
}

#[test]
fn hostile_cgroup_names_are_skipped_or_parsed_safely() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = hybrid_root();
    let qos = mkcg(tmp.path(), "memory", "kubepods/besteffort");
    fs::create_dir(qos.join(std::ffi::OsStr::from_bytes(b"pod\xff\xfe"))).expect("non-utf8");
    let long_uid = "u".repeat(252);
    fs::create_dir(qos.join(format!("pod{long_uid}"))).expect("255-byte name");
    let uid = "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b";
    fs::create_dir(qos.join(format!("pod{uid}"))).expect("a pod");
    fs::create_dir(qos.join(format!("pod{}", uid.to_uppercase()))).expect("upper case");
    fs::create_dir(qos.join(format!("pod{uid}0"))).expect("one too long");
    fs::create_dir(qos.join("pod..")).expect("dots");
    fs::create_dir(qos.join("pod.")).expect("dot");
    fs::create_dir(qos.join("pod pod")).expect("space");
    let layout = CgroupLayout::detect(tmp.path(), CgroupDriver::Cgroupfs, "/").expect("detect");
    let pods = scan_pod_cgroups(&layout).expect("scan");
    let uids: Vec<_> = pods.iter().map(|p| p.uid.as_str()).collect();
    // `pod.` / `pod..` would give the UIDs `.` / `..`: rejected, like a UID containing "pod" and
    // anything else that is not one of kubelet's UID shapes.
    assert_eq!(uids, [uid]);
    assert_eq!(parse_pod_cgroup_name(CgroupDriver::Cgroupfs, "pod.."), None);
}

#[test]
fn children_of_qos_parents_that_are_not_pods_are_foreign_once_and_kubelets_qos_cgroups_are_not() {
    let tmp = hybrid_root();
    let r = tmp.path();
    let uid = "0000000b-0000-4000-8000-000000000002";
    for h in ["cpu,cpuacct", "memory", "unified"] {
        mkcg(r, h, "kubepods/burstable");
        mkcg(r, h, "kubepods/besteffort");
        mkcg(r, h, &format!("kubepods/burstable/pod{uid}"));
        // Another agent's cgroup, in every hierarchy: one foreign line, not three.
        mkcg(r, h, "kubepods/burstable/agent");
    }
    mkcg(r, "memory", "kubepods/podNOT-A-UID");
    let bad = std::ffi::OsStr::from_bytes(b"pod\xff");
    fs::create_dir_all(r.join("pids/kubepods/besteffort").join(bad)).expect("mkdir");
    fs::write(r.join("memory/kubepods/burstable/cgroup.procs"), "").expect("interface file");

    let layout = CgroupLayout::detect(r, CgroupDriver::Cgroupfs, "/").expect("detect");
    let scan = scan_cgroups(&layout).expect("scan");
    let uids: Vec<_> = scan.found.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, [uid]);
    let foreign: Vec<_> = scan
        .foreign
        .iter()
        .map(|f| f.path.strip_prefix(r).expect("under root").to_path_buf())
        .collect();
    assert_eq!(
        foreign,
        [
            PathBuf::from("cpu,cpuacct/kubepods/burstable/agent"),
            PathBuf::from("memory/kubepods/podNOT-A-UID"),
            Path::new("pids/kubepods/besteffort").join(bad),
        ]
    );
    assert!(
        scan.foreign[0].reason.contains("pod<uid>"),
        "{}",
        scan.foreign[0].reason
    );
    assert!(
        scan.foreign[2].reason.contains("UTF-8"),
        "{:?}",
        scan.foreign[2]
    );

    // The systemd layout's QoS slices are kubelet's too.
    for h in ["systemd", "unified"] {
        mkcg(r, h, "kubepods.slice/kubepods-burstable.slice");
        mkcg(r, h, "kubepods.slice/kubepods-besteffort.slice");
    }
    mkcg(
        r,
        "unified",
        "kubepods.slice/kubepods-burstable.slice/other.scope",
    );
    let sd = CgroupLayout::detect(r, CgroupDriver::Systemd, "/").expect("detect");
    let scan = scan_cgroups(&sd).expect("scan systemd");
    let foreign: Vec<_> = scan.foreign.iter().map(|f| f.path.clone()).collect();
    assert_eq!(
        foreign,
        [r.join("unified/kubepods.slice/kubepods-burstable.slice/other.scope")]
    );
    assert!(scan.found.is_empty());
}
