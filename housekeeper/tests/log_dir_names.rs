//! Log dir names and removal on plain temp trees: kubelet's "last `_` field is the UID" rule, the
//! legacy `<uid>` layout, hostile names, and removal that neither follows a symlink nor touches a
//! mount.

use std::fs;

use podward_housekeeper::log_dir::{
    LogDirError, parse_log_dir_name, remove_log_dir, scan_log_dirs,
};
use podward_housekeeper::mounts::MountTable;

#[test]
fn names() {
    assert_eq!(
        parse_log_dir_name(
            "kube-system_coredns-5d78c9869d-abcde_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b"
        ),
        Some((
            "kube-system".into(),
            "coredns-5d78c9869d-abcde".into(),
            "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b".into()
        ))
    );
    assert_eq!(
        parse_log_dir_name("6b1aa4d4"),
        Some((String::new(), String::new(), "6b1aa4d4".into()))
    );
    for bad in [
        "a_b",
        "a_b_c_d",
        "_b_c",
        "a__c",
        "a_b_",
        "..",
        "a_b_..",
        "",
        "ns_name_.",
    ] {
        assert_eq!(parse_log_dir_name(bad), None, "{bad:?}");
    }
    let long = format!("ns_{}_uid", "x".repeat(250));
    assert_eq!(parse_log_dir_name(&long).map(|p| p.2), Some("uid".into()));
}

#[test]
fn scan_skips_files_symlinks_and_non_utf8() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    fs::create_dir(root.join("default_web-0_u1")).expect("mkdir");
    fs::create_dir(root.join("legacyuid")).expect("mkdir");
    fs::create_dir(root.join("a_b")).expect("mkdir");
    fs::write(root.join("default_file_u2"), "").expect("file");
    std::os::unix::fs::symlink("/etc", root.join("default_link_u3")).expect("symlink");
    use std::os::unix::ffi::OsStrExt;
    fs::create_dir(root.join(std::ffi::OsStr::from_bytes(b"ns_\xff_u4"))).expect("non-utf8");
    let dirs = scan_log_dirs(root).expect("scan");
    let uids: Vec<_> = dirs.iter().map(|d| d.uid.as_str()).collect();
    assert_eq!(uids, ["u1", "legacyuid"]);
    assert_eq!(dirs[0].namespace, "default");
    assert_eq!(dirs[0].name, "web-0");
    assert!(matches!(
        scan_log_dirs(&root.join("missing")),
        Err(LogDirError::Read { .. })
    ));
}

#[test]
fn remove_deletes_the_tree_but_not_symlink_targets_and_refuses_mounted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("logs");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(outside.join("keep.txt"), "precious").expect("write");
    let dir = root.join("default_web-0_u1");
    fs::create_dir_all(dir.join("web")).expect("mkdir");
    fs::write(dir.join("web/0.log"), "line\n").expect("write");
    fs::write(dir.join("web/0.log.20260101-000000.gz"), "gz").expect("write");
    std::os::unix::fs::symlink(&outside, dir.join("web/link")).expect("symlink");
    let log = scan_log_dirs(&root).expect("scan").remove(0);

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
