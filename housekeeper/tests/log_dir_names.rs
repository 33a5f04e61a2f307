//! Log dir names and removal on plain temp trees: only kubelet's `<namespace>_<name>_<uid>` (DNS
//! namespace and name, a pod UID in kubelet's shape) or the legacy `<uid>` is a log dir; anything
//! else under the root is foreign, reported and never removed; removal neither follows a symlink
//! nor touches a mount.

use std::fs;
use std::os::unix::ffi::OsStrExt;

use podward_housekeeper::node::log_dir::{
    LogDir, LogDirError, parse_log_dir_name, remove_log_dir, scan_log_dirs,
};
use podward_housekeeper::node::mounts::MountTable;

const UID: &str = "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b";
const HASH: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn only_kubelets_log_dir_names_parse() {
    assert_eq!(
        parse_log_dir_name(&format!("kube-system_coredns-5d78c9869d-abcde_{UID}")),
        Ok((
            "kube-system".into(),
            "coredns-5d78c9869d-abcde".into(),
            UID.into()
        ))
    );
    assert_eq!(
        parse_log_dir_name(HASH),
        Ok((String::new(), String::new(), HASH.into())),
        "legacy <uid> layout, static pod hash"
    );
    let long_name = format!("ns_{}_{UID}", "x".repeat(200));
    assert!(parse_log_dir_name(&long_name).is_ok());
    for bad in [
        "a_b".to_owned(),
        "a_b_c_d".to_owned(),
        "_b_c".to_owned(),
        "a__c".to_owned(),
        "a_b_".to_owned(),
        "..".to_owned(),
        "a_b_..".to_owned(),
        String::new(),
        "ns_name_.".to_owned(),
        "6b1aa4d4".to_owned(),
        format!("ns_{}_uid", "x".repeat(250)),
        "etc".to_owned(),
        format!("NS_web_{UID}"),
        format!("ns_web_{}", UID.to_uppercase()),
    ] {
        assert!(parse_log_dir_name(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn scan_lists_kubelets_dirs_and_reports_everything_else_as_foreign() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let web = format!("default_web-0_{UID}");
    fs::create_dir(root.join(&web)).expect("mkdir");
    fs::create_dir(root.join(HASH)).expect("mkdir");
    fs::create_dir(root.join("a_b")).expect("mkdir");
    fs::create_dir(root.join("etc")).expect("mkdir");
    fs::write(root.join(format!("default_file_{UID}")), "").expect("file");
    std::os::unix::fs::symlink("/etc", root.join(format!("default_link_{UID}"))).expect("symlink");
    fs::create_dir(root.join(std::ffi::OsStr::from_bytes(b"ns_\xff_u4"))).expect("non-utf8");
    let scan = scan_log_dirs(root).expect("scan");
    let uids: Vec<_> = scan.found.iter().map(|d| d.uid.as_str()).collect();
    assert_eq!(uids, [HASH, UID]);
    assert_eq!(scan.found[1].namespace, "default");
    assert_eq!(scan.found[1].name, "web-0");
    let foreign: Vec<_> = scan
        .foreign
        .iter()
        .map(|f| {
            (
                f.path
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
                f.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(foreign.len(), 5, "{foreign:?}");
    let reason = |name: &str| {
        foreign
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| *r)
            .unwrap_or_else(|| panic!("{name} not reported: {foreign:?}"))
    };
    assert!(reason("a_b").contains("not <namespace>_<name>_<uid>"));
    assert!(reason("etc").contains("is not a pod UID"));
    assert_eq!(reason(&format!("default_file_{UID}")), "not a directory");
    assert!(reason(&format!("default_link_{UID}")).contains("symlink"));
    assert!(reason("ns_\u{fffd}_u4").contains("UTF-8"));
    assert!(matches!(
        scan_log_dirs(&root.join("missing")),
        Err(LogDirError::Read(_))
    ));
}

#[test]
fn remove_deletes_the_tree_but_not_symlink_targets_and_refuses_mounted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("logs");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(outside.join("keep.txt"), "precious").expect("write");
    let dir = root.join(format!("default_web-0_{UID}"));
    fs::create_dir_all(dir.join("web")).expect("mkdir");
    fs::write(dir.join("web/0.log"), "line\n").expect("write");
    fs::write(dir.join("web/0.log.20260101-000000.gz"), "gz").expect("write");
    std::os::unix::fs::symlink(&outside, dir.join("web/link")).expect("symlink");
    let log = scan_log_dirs(&root).expect("scan").found.remove(0);

    let mounted = MountTable::from_points(vec![dir.join("web")]);
    match remove_log_dir(&log, &mounted) {
        Err(LogDirError::Mounted { mounts, .. }) => assert_eq!(mounts, [dir.join("web")]),
        other => panic!("expected Mounted, got {other:?}"),
    }
    assert!(dir.join("web/0.log").exists(), "refusal removed nothing");

    let removed = remove_log_dir(&log, &MountTable::default()).expect("remove");
    assert_eq!(removed, 5, "3 files/links + web + the dir");
    assert!(!dir.exists());
    assert_eq!(
        fs::read_to_string(outside.join("keep.txt")).expect("kept"),
        "precious"
    );
    // Removing again is a no-op, not an error.
    assert_eq!(
        remove_log_dir(&log, &MountTable::default()).expect("again"),
        0
    );
}

#[test]
fn remove_log_dir_refuses_a_dir_whose_name_is_not_a_pod_log_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // A caller that built the LogDir by hand, from a wrong root or a stale scan.
    let cases = [
        ("etc", "etc", "passwd"),
        ("home", "home", "alice/thesis.txt"),
        ("ns_name_not-a-uid", "not-a-uid", "0.log"),
        // A kubelet-shaped name, but not the UID the caller claims.
        (&format!("default_web-0_{UID}") as &str, HASH, "0.log"),
    ];
    for (name, uid, file) in cases {
        let dir = root.join(name);
        fs::create_dir_all(dir.join(file).parent().expect("parent")).expect("mkdir");
        fs::write(dir.join(file), "keep me").expect("write");
        let log = LogDir {
            namespace: String::new(),
            name: String::new(),
            uid: uid.to_owned(),
            path: dir.clone(),
        };
        let res = remove_log_dir(&log, &MountTable::default());
        assert!(res.is_err(), "{name}: removed: {res:?}");
        assert_eq!(
            fs::read_to_string(dir.join(file)).expect("still there"),
            "keep me",
            "{name}"
        );
    }
}
