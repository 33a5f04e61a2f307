//! Mountinfo parsing: octal escapes, non-UTF-8 mount points, malformed lines, prefix queries by
//! path component, and speed on a 5,000-line table.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use podward_housekeeper::node::mounts::{MountError, MountTable};

const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
100 22 0:50 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/my\\040secret rw shared:5 - tmpfs tmpfs rw
101 22 8:1 /data /var/lib/kubelet/pods/u1/volume-subpaths/v/c/0 rw - ext4 /dev/sda1 rw
102 22 0:51 / /var/lib/kubelet/pods/u10/volumes/x rw - tmpfs tmpfs rw
103 22 0:52 / /tab\\011and\\012newline\\134back rw - tmpfs tmpfs rw
104 22 0:53 / /var/lib/kubelet/pods/u1 rw - tmpfs tmpfs rw
";

#[test]
fn parses_and_unescapes() {
    let t = MountTable::parse(SAMPLE).expect("parse");
    assert_eq!(t.len(), 7);
    let u1 = Path::new("/var/lib/kubelet/pods/u1");
    assert_eq!(
        t.mounts_at_or_under(u1),
        [
            PathBuf::from("/var/lib/kubelet/pods/u1"),
            PathBuf::from("/var/lib/kubelet/pods/u1/volume-subpaths/v/c/0"),
            PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/my secret"),
        ]
    );
    assert_eq!(
        t.mounts_at_or_under(Path::new("/tab\tand\nnewline\\back"))
            .len(),
        1
    );
    // Component-wise: `u1` does not match `u10`, and a trailing slash does not matter.
    assert_eq!(
        t.mounts_at_or_under(Path::new("/var/lib/kubelet/pods/u10/")),
        [PathBuf::from("/var/lib/kubelet/pods/u10/volumes/x")]
    );
    assert_eq!(
        t.mounts_at_or_under(Path::new("/var/lib/kubelet/pods/u2")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(t.mounts_at_or_under(Path::new("/")).len(), 7);
    assert_eq!(
        t.mounts_at_or_under(Path::new(
            "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/my"
        ))
        .len(),
        0
    );
}

#[test]
fn non_utf8_mount_point() {
    let mut text = b"1 0 0:1 / /weird/".to_vec();
    text.extend_from_slice(&[0xff, 0xfe]);
    text.extend_from_slice(b" rw - tmpfs tmpfs rw\n");
    let t = MountTable::parse_bytes(&text).expect("parse");
    let p = Path::new(OsStr::from_bytes(b"/weird/\xff\xfe"));
    assert_eq!(t.mounts_at_or_under(Path::new("/weird")), [p.to_path_buf()]);
}

#[test]
fn malformed_lines_are_errors() {
    for bad in [
        "1 0 0:1 /",
        "1 0 0:1 / relative rw - tmpfs tmpfs rw",
        "1 0 0:1 / /x rw tmpfs tmpfs rw",
    ] {
        assert!(
            matches!(
                MountTable::parse(bad),
                Err(MountError::Parse { line: 1, .. })
            ),
            "{bad:?}"
        );
    }
    // Blank lines (the trailing newline) are fine.
    assert_eq!(MountTable::parse("\n\n").expect("blank").len(), 0);
    assert!(matches!(
        MountTable::read(Path::new("/nonexistent/mountinfo")),
        Err(MountError::Read { .. })
    ));
}

#[test]
fn reads_this_process_mountinfo() {
    let t = MountTable::read(Path::new("/proc/self/mountinfo")).expect("read");
    assert!(!t.mounts_at_or_under(Path::new("/")).is_empty());
    assert!(
        t.mounts_at_or_under(Path::new("/proc"))
            .contains(&PathBuf::from("/proc"))
    );
}

#[test]
fn five_thousand_lines_parse_and_answer_every_prefix_query() {
    // Speed is the housekeeper_pass benchmark's to judge (docs/benchmarks.md), not a test's: on a
    // shared machine a timed assertion fails for the load, not the code. This proves the scale.

    let mut text = String::new();
    for i in 0..5_000 {
        text.push_str(&format!(
            "{} 22 0:{} / /var/lib/kubelet/pods/{:08x}-aaaa/volumes/kubernetes.io~projected/kube-api-access-x\\040y rw,relatime shared:{} - tmpfs tmpfs rw,size=1024k\n",
            i + 100,
            i + 50,
            i % 2_500,
            i
        ));
    }
    let start = Instant::now();
    let t = MountTable::parse(&text).expect("parse");
    let parsed = start.elapsed();
    let start = Instant::now();
    let mut hits = 0;
    for i in 0..10_000 {
        hits += t
            .mounts_at_or_under(&PathBuf::from(format!(
                "/var/lib/kubelet/pods/{i:08x}-aaaa"
            )))
            .len();
    }
    let queried = start.elapsed();
    eprintln!("parse 5,000 lines: {parsed:?}; 10,000 prefix queries: {queried:?}");
    assert_eq!(t.len(), 2_500);
    assert_eq!(hits, 2_500);
}
