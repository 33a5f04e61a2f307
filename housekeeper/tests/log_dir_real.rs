//! Log dir removal against a real mount: refused by the mount table, and — with a stale table — by
//! the walk itself, with the mounted data intact either way. Runs in a private mount namespace;
//! needs root.

use std::fs;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use podward_housekeeper::node::log_dir::{LogDirError, remove_log_dir, scan_log_dirs};
use podward_housekeeper::node::mounts::MountTable;

#[path = "support/mount_ns.rs"]
mod mount_ns;

/// Unmounts on drop, even when an assertion fails.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

#[test]
fn mounted_log_dir_is_not_removed() {
    mount_ns::enter_private();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp
        .path()
        .join("default_web-0_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b");
    let mnt = dir.join("web");
    fs::create_dir_all(&mnt).expect("mkdir");
    fs::write(dir.join("top.log"), "top").expect("write");
    mount(
        Some("tmpfs"),
        &mnt,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("size=1m"),
    )
    .expect("tmpfs");
    let _guard = Unmount(mnt.clone());
    fs::write(mnt.join("0.log"), "kept").expect("write");
    let log = scan_log_dirs(tmp.path()).expect("scan").found.remove(0);

    // thread-self: this test thread has its own mount namespace.
    let table = MountTable::read(Path::new("/proc/thread-self/mountinfo")).expect("mountinfo");
    assert!(matches!(
        remove_log_dir(&log, &table),
        Err(LogDirError::Mounted { .. })
    ));
    match remove_log_dir(&log, &MountTable::default()) {
        Err(LogDirError::Blocked { reasons, .. }) => {
            assert_eq!(reasons, [format!("{} is a mount point", mnt.display())]);
        }
        other => panic!("expected the walk to find the mount, got {other:?}"),
    }
    assert!(
        dir.join("top.log").exists(),
        "nothing removed before the refusal"
    );
    assert_eq!(fs::read_to_string(mnt.join("0.log")).expect("kept"), "kept");
}
