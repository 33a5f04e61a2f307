//! Pod dir removal against real mounts: tmpfs and bind mounts under `volumes/` and
//! `volume-subpaths/` (including kubernetes #72257's same-filesystem subpath bind), a nested
//! filesystem, a symlink to a directory outside, a file in a volume dir and CSI's `vol_data.json`.
//!
//! Every protected tree is checksummed (sha256 over relative path, type, link target and content)
//! before and after, so "no byte outside what must go is removed" is checked, not assumed. Runs in
//! a private mount namespace; a guard unmounts everything even when an assertion fails. Needs root.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use podward_housekeeper::node::mounts::MountTable;
use podward_housekeeper::node::pod_dir::{
    PodDir, PodDirError, Removal, assess_removal, mounted_volumes, remove_pod_dir, scan_pod_dirs,
};
use sha2::{Digest, Sha256};
use uids::uid_of;

#[path = "support/mount_ns.rs"]
mod mount_ns;
#[path = "support/uids.rs"]
mod uids;

/// A temp dir with mounts under it, all unmounted (deepest first) on drop.
struct Fixture {
    tmp: tempfile::TempDir,
    mounts: Vec<PathBuf>,
}

impl Fixture {
    fn new() -> Self {
        mount_ns::enter_private();
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::create_dir(tmp.path().join("pods")).expect("pods");
        Fixture {
            tmp,
            mounts: Vec::new(),
        }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// The pod dir of the test pod called `name` (its UID is `uid_of(name)`).
    fn pod(&self, name: &str) -> PodDir {
        let uid = uid_of(name);
        let path = self.root().join("pods").join(&uid);
        fs::create_dir_all(&path).expect("mkdir pod");
        PodDir { uid, path }
    }

    fn tmpfs(&mut self, at: &Path) {
        fs::create_dir_all(at).expect("mkdir mount point");
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=1m"),
        )
        .expect("mount tmpfs");
        self.mounts.push(at.to_path_buf());
    }

    fn bind(&mut self, from: &Path, at: &Path) {
        if from.is_dir() {
            fs::create_dir_all(at).expect("mkdir bind target");
        } else {
            fs::create_dir_all(at.parent().expect("parent")).expect("mkdir parent");
            fs::write(at, "").expect("bind target file");
        }
        mount(Some(from), at, None::<&str>, MsFlags::MS_BIND, None::<&str>).expect("bind mount");
        self.mounts.push(at.to_path_buf());
    }

    fn umount(&mut self, at: &Path) {
        umount2(at, MntFlags::empty()).expect("umount");
        self.mounts.retain(|m| m != at);
    }

    /// The mount table as the housekeeper would read it.
    fn table(&self) -> MountTable {
        // thread-self: the test thread unshared its own mount namespace; /proc/self is the main
        // thread's view.
        MountTable::read(Path::new("/proc/thread-self/mountinfo")).expect("mountinfo")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = umount2(m, MntFlags::MNT_DETACH);
        }
    }
}

/// sha256 over every entry below `root`: relative path, type, symlink target, file content.
/// Symlinks are hashed as links (not followed); the walk stays on whatever is mounted below.
fn tree_hash(root: &Path) -> String {
    let mut entries = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = fs::symlink_metadata(&p).expect("lstat");
        let rel = p
            .strip_prefix(root)
            .expect("prefix")
            .as_os_str()
            .as_bytes()
            .to_vec();
        let mut h = Sha256::new();
        h.update(&rel);
        if meta.file_type().is_symlink() {
            h.update(b"L");
            h.update(fs::read_link(&p).expect("readlink").as_os_str().as_bytes());
        } else if meta.is_dir() {
            h.update(b"D");
            for e in fs::read_dir(&p).expect("readdir") {
                stack.push(e.expect("entry").path());
            }
        } else {
            h.update(b"F");
            h.update(fs::read(&p).expect("read"));
        }
        entries.push(h.finalize().to_vec());
    }
    entries.sort();
    let mut all = Sha256::new();
    for e in &entries {
        all.update(e);
    }
    format!("{:x}/{}", all.finalize(), entries.len())
}

fn fill(dir: &Path, tag: &str) {
    fs::create_dir_all(dir.join("sub")).expect("mkdir");
    fs::write(dir.join("data.bin"), format!("{tag} payload").repeat(100)).expect("write");
    fs::write(dir.join("sub/notes.txt"), tag).expect("write");
}

fn reasons(dir: &PodDir, table: &MountTable) -> Vec<String> {
    match assess_removal(dir, table).expect("assess") {
        Removal::Blocked { reasons } => reasons,
        other => panic!("{} must be blocked: {other:?}", dir.path.display()),
    }
}

#[test]
fn mounted_volumes_block_and_lose_nothing() {
    let mut f = Fixture::new();
    let host = f.root().join("hostdata");
    fill(&host, "host");
    let p = f.pod("mounted");
    let mem = p.path.join("volumes/kubernetes.io~empty-dir/mem");
    f.tmpfs(&mem);
    fill(&mem, "tmpfs");
    // #72257: a subpath bind mount from the same filesystem (st_dev is equal).
    let sub = p.path.join("volume-subpaths/local/web/0");
    f.bind(&host, &sub);
    // A file subpath (bind-mounted file).
    let file_sub = p.path.join("volume-subpaths/cfg/web/1");
    f.bind(&host.join("data.bin"), &file_sub);
    fill(&p.path.join("containers/web"), "ctr");
    let before_pod = tree_hash(&p.path);
    let before_host = tree_hash(&host);

    let table = f.table();
    let mounted = mounted_volumes(&p, &table);
    assert_eq!(mounted, [file_sub.clone(), sub.clone(), mem.clone()]);
    let why = reasons(&p, &table);
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(why.iter().all(|r| r.ends_with("is mounted")), "{why:?}");
    match remove_pod_dir(&p, &table) {
        Err(PodDirError::Blocked { reasons, .. }) => assert_eq!(reasons.len(), 3),
        other => panic!("expected Blocked, got {other:?}"),
    }
    // A stale (empty) table must not help: the walk sees the mounts itself (statx mount root /
    // mount id), even the same-filesystem bind mount, and removes nothing. The walk stops at the
    // first.
    let why = reasons(&p, &MountTable::default());
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why.iter().all(|r| r.contains("mount point")), "{why:?}");
    assert!(remove_pod_dir(&p, &MountTable::default()).is_err());
    assert_eq!(tree_hash(&p.path), before_pod);
    assert_eq!(tree_hash(&host), before_host);
}

#[test]
fn subpath_bind_without_volumes_dir_is_not_deleted() {
    // The exact #72257 shape: `volumes/` already gone and a same-filesystem bind mount left in
    // `volume-subpaths/`; plus the worse variant, a same-fs bind where everything is removed
    // recursively (`containers/`), so only the mount check stands between it and the data.
    let mut f = Fixture::new();
    let host = f.root().join("local-pv");
    fill(&host, "pv");
    let before = tree_hash(&host);
    let sub = f.pod("u72257");
    f.bind(&host, &sub.path.join("volume-subpaths/pv/app/0"));
    let ctr = f.pod("bind-in-containers");
    f.bind(&host, &ctr.path.join("containers/app/bound"));
    for p in [&sub, &ctr] {
        for (table, expect) in [
            (f.table(), "is mounted"),
            (MountTable::default(), "is a mount point"),
        ] {
            let why = reasons(p, &table);
            assert_eq!(why.len(), 1, "{why:?}");
            assert!(why[0].ends_with(expect), "{why:?}");
            assert!(remove_pod_dir(p, &table).is_err());
            assert_eq!(tree_hash(&host), before);
        }
    }
}

#[test]
fn nested_filesystem_outside_volumes_blocks() {
    let mut f = Fixture::new();
    let p = f.pod("nested");
    let nested = p.path.join("plugins/kubernetes.io~empty-dir/vol/nested-fs");
    f.tmpfs(&nested);
    fill(&nested, "nested");
    fill(&p.path.join("containers/web"), "ctr");
    let before = tree_hash(&p.path);
    assert_eq!(reasons(&p, &f.table()).len(), 1);
    let why = reasons(&p, &MountTable::default());
    assert!(
        why[0].contains("nested-fs") && why[0].contains("mount point"),
        "{why:?}"
    );
    assert!(remove_pod_dir(&p, &MountTable::default()).is_err());
    assert_eq!(
        tree_hash(&p.path),
        before,
        "containers/ was not removed either"
    );
}

#[test]
fn file_in_volume_blocks_symlink_is_removed_as_link() {
    let f = Fixture::new();
    let outside = f.root().join("outside");
    fill(&outside, "outside");
    let before_outside = tree_hash(&outside);

    let blocked = f.pod("file-in-volume");
    fill(
        &blocked.path.join("volumes/kubernetes.io~configmap/cfg"),
        "cm",
    );
    let before = tree_hash(&blocked.path);
    // The walk stops at the first file it meets (getdents order): either of the two.
    let why = reasons(&blocked, &f.table());
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].ends_with("cfg/data.bin is a regular file in a volume directory")
            || why[0].ends_with("cfg/sub/notes.txt is a regular file in a volume directory"),
        "{why:?}"
    );
    assert!(remove_pod_dir(&blocked, &f.table()).is_err());
    assert_eq!(tree_hash(&blocked.path), before);

    let linked = f.pod("with-link");
    fill(&linked.path.join("containers/web"), "ctr");
    std::os::unix::fs::symlink(&outside, linked.path.join("containers/web/to-outside"))
        .expect("symlink");
    std::os::unix::fs::symlink(&outside, linked.path.join("etc-hosts")).expect("symlink");
    fs::create_dir_all(linked.path.join("volumes/kubernetes.io~secret/token"))
        .expect("empty volume dir");
    let report = remove_pod_dir(&linked, &f.table()).expect("remove");
    assert!(!linked.path.exists());
    assert_eq!(
        report.removed_entries, 11,
        "6 under containers/, etc-hosts, 3 under volumes/, the pod dir"
    );
    assert_eq!(tree_hash(&outside), before_outside);
    // The blocked pod next door is still intact.
    assert_eq!(tree_hash(&blocked.path), before);
}

#[test]
fn clean_orphan_is_removed_completely_and_neighbours_stay() {
    let mut f = Fixture::new();
    let live = f.pod("live");
    let live_vol = live
        .path
        .join("volumes/kubernetes.io~projected/kube-api-access-x");
    f.tmpfs(&live_vol);
    fill(&live_vol, "token");
    let before_live = tree_hash(&live.path);
    let orphan = f.pod("orphan");
    fs::write(orphan.path.join("etc-hosts"), "127.0.0.1 localhost\n").expect("hosts");
    fill(&orphan.path.join("containers/web"), "ctr");
    fill(
        &orphan.path.join("plugins/kubernetes.io~empty-dir/cache"),
        "plugin",
    );
    fs::create_dir_all(orphan.path.join("volumes/kubernetes.io~empty-dir/cache")).expect("mkdir");
    fs::create_dir_all(orphan.path.join("volume-subpaths/v/web/0")).expect("mkdir");
    // An unmounted tmpfs leaves an empty mount point behind: that is what an orphan looks like.
    let was = orphan.path.join("volumes/kubernetes.io~secret/tok");
    f.tmpfs(&was);
    fill(&was, "secret");
    f.umount(&was);

    let table = f.table();
    assert_eq!(
        assess_removal(&orphan, &table).expect("assess"),
        Removal::Clean
    );
    remove_pod_dir(&orphan, &table).expect("remove");
    assert!(!orphan.path.exists());
    let left: Vec<_> = scan_pod_dirs(f.root())
        .expect("scan")
        .found
        .into_iter()
        .map(|d| d.uid)
        .collect();
    assert_eq!(left, [uid_of("live")]);
    assert_eq!(tree_hash(&live.path), before_live);
}

#[test]
fn csi_vol_data_json_with_real_mount() {
    let mut f = Fixture::new();
    let p = f.pod("csi");
    let vol = p.path.join("volumes/kubernetes.io~csi/pvc-1");
    let mnt = vol.join("mount");
    f.tmpfs(&mnt);
    fill(&mnt, "csi data");
    fs::write(
        vol.join("vol_data.json"),
        r#"{"driverName":"hostpath.csi.k8s.io"}"#,
    )
    .expect("json");
    let before = tree_hash(&p.path);
    // Mounted: blocked, vol_data.json kept (it is needed to unmount).
    assert!(remove_pod_dir(&p, &f.table()).is_err());
    assert!(remove_pod_dir(&p, &MountTable::default()).is_err());
    assert_eq!(tree_hash(&p.path), before);
    // After a hard reboot: the mount is gone, `mount/` is empty, only vol_data.json is left.
    f.umount(&mnt);
    let report = remove_pod_dir(&p, &f.table()).expect("remove leftover");
    assert_eq!(report.removed_csi_vol_data, [vol.join("vol_data.json")]);
    assert!(!p.path.exists());
}

#[test]
fn directory_swapped_for_symlink_mid_walk_is_never_followed() {
    // A thread keeps swapping `containers/web` between a real directory and a symlink to a
    // directory outside while the removal walks. Whatever the interleaving, the walk opens each
    // directory with O_NOFOLLOW and checks the inode it stat'ed, so nothing outside may go.
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let f = Fixture::new();
    let outside = f.root().join("outside");
    fill(&outside, "outside");
    let before = tree_hash(&outside);
    let mut outcomes = (0, 0);
    for round in 0..200 {
        let p = f.pod(&format!("race{round}"));
        let web = p.path.join("containers/web");
        fill(&web, "ctr");
        let stash = p.path.join("containers/stash");
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, web, stash, outside) =
                (stop.clone(), web.clone(), stash.clone(), outside.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if fs::rename(&web, &stash).is_err() {
                        return;
                    }
                    let _ = std::os::unix::fs::symlink(&outside, &web);
                    std::thread::yield_now();
                    let _ = fs::remove_file(&web);
                    if fs::rename(&stash, &web).is_err() {
                        return;
                    }
                }
            })
        };
        match remove_pod_dir(&p, &MountTable::default()) {
            Ok(_) => outcomes.0 += 1,
            Err(_) => outcomes.1 += 1,
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("swapper");
        assert_eq!(
            tree_hash(&outside),
            before,
            "round {round}: data outside was touched"
        );
    }
    eprintln!(
        "swap race: {} removals completed, {} stopped",
        outcomes.0, outcomes.1
    );
}
