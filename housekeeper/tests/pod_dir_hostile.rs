//! What a hostile pod leaves in an orphaned pod dir, on the real filesystem: FIFOs, sockets,
//! device nodes, `chmod 000` directories, immutable files, names with newlines or bytes that are
//! not UTF-8, a 10,000-deep chain. Each is handled without blocking (nothing is ever opened but
//! directories), reported precisely (which entry, and why), never removed on a partial walk, and
//! a pass over all of them goes on to the other orphans. Needs root (mknod, chattr).

#[path = "support/fake.rs"]
mod fake;
#[path = "support/tmpfs.rs"]
mod tmpfs;
#[path = "support/uids.rs"]
mod uids;

use std::ffi::{CString, OsStr};
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake::{FakeNode, RecordingActuator, reconciler};
use nix::sys::stat::{Mode as NixMode, SFlag, makedev, mknod};
use podward_api::housekeeper::v1::{ActionKind, FindingKind};
use podward_api::outside_text::from_bytes;
use podward_housekeeper::node::mounts::MountTable;
use podward_housekeeper::node::pod_dir::{
    PodDir, PodDirError, Removal, WalkBounds, assess_removal, assess_removal_within,
    remove_pod_dir, remove_pod_dir_within,
};
use podward_housekeeper::reconcile::Mode;
use rustix::fs::{Mode as Perm, OFlags};
use uids::uid_of;

/// Any assessment here is a handful of syscalls; a blocked `open` would be forever.
const QUICK: Duration = Duration::from_secs(2);
/// How deep the chain goes.
const CHAIN: usize = 10_000;

fn pod(root: &Path, name: &str) -> PodDir {
    let uid = uid_of(name);
    let path = root.join("pods").join(&uid);
    fs::create_dir_all(&path).expect("mkdir pod");
    PodDir { uid, path }
}

fn emptydir(p: &PodDir) -> PathBuf {
    let v = p.path.join("volumes/kubernetes.io~empty-dir/data");
    fs::create_dir_all(&v).expect("mkdir volume");
    v
}

fn kubelet_root() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::create_dir(tmp.path().join("pods")).expect("pods");
    tmp
}

/// The one reason the assessment gives, within [`QUICK`].
fn the_reason(dir: &PodDir) -> String {
    let t = Instant::now();
    let r = assess_removal(dir, &MountTable::default()).expect("assess");
    assert!(t.elapsed() < QUICK, "assessing took {:?}", t.elapsed());
    match r {
        Removal::Blocked { reasons } => {
            assert_eq!(reasons.len(), 1, "{reasons:?}");
            reasons[0].clone()
        }
        other => panic!("{} should be blocked: {other:?}", dir.path.display()),
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, NixMode::from_bits_truncate(0o644)).expect("mkfifo");
}

fn mkchar(path: &Path) {
    // /dev/null's numbers: a node that would answer if it were ever opened.
    mknod(
        path,
        SFlag::S_IFCHR,
        NixMode::from_bits_truncate(0o666),
        makedev(1, 3),
    )
    .expect("mknod (needs root)");
}

fn mksock(path: &Path) -> std::os::unix::net::UnixListener {
    std::os::unix::net::UnixListener::bind(path).expect("bind")
}

#[test]
fn special_files_in_a_volume_block_without_being_opened() {
    let root = kubelet_root();
    let fifo = pod(root.path(), "fifo");
    mkfifo(&emptydir(&fifo).join("pipe"));
    let reason = the_reason(&fifo);
    assert!(
        reason.ends_with("data/pipe is a fifo in a volume directory"),
        "{reason}"
    );

    let sock = pod(root.path(), "sock");
    let _listener = mksock(&emptydir(&sock).join("s"));
    assert!(the_reason(&sock).ends_with("data/s is a socket in a volume directory"));

    let dev = pod(root.path(), "dev");
    mkchar(&emptydir(&dev).join("null"));
    assert!(the_reason(&dev).ends_with("data/null is a character device in a volume directory"));

    for p in [&fifo, &sock, &dev] {
        assert!(matches!(
            remove_pod_dir(p, &MountTable::default()),
            Err(PodDirError::Blocked { .. })
        ));
        assert!(p.path.join("volumes/kubernetes.io~empty-dir/data").exists());
    }
}

#[test]
fn special_files_outside_volumes_are_unlinked_never_opened() {
    let root = kubelet_root();
    let p = pod(root.path(), "specials-outside");
    let ctr = p.path.join("containers/app");
    fs::create_dir_all(&ctr).expect("mkdir");
    mkfifo(&ctr.join("pipe"));
    mkchar(&ctr.join("null"));
    let _listener = mksock(&ctr.join("s"));
    let t = Instant::now();
    assert_eq!(
        assess_removal(&p, &MountTable::default()).expect("assess"),
        Removal::Clean
    );
    let report = remove_pod_dir(&p, &MountTable::default()).expect("remove");
    assert!(t.elapsed() < QUICK);
    assert_eq!(
        report.removed_entries, 6,
        "3 specials, app, containers, the pod dir"
    );
    assert!(!p.path.exists());
}

#[test]
fn a_chmod_000_directory_is_read_and_reported_by_what_it_holds() {
    let root = kubelet_root();
    let locked = pod(root.path(), "locked-volume");
    let dir = emptydir(&locked).join("locked");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(dir.join("secret"), "x").expect("write");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).expect("chmod");
    let reason = the_reason(&locked);
    assert!(
        reason.ends_with("locked/secret is a regular file in a volume directory"),
        "{reason}"
    );
    assert!(remove_pod_dir(&locked, &MountTable::default()).is_err());
    assert!(dir.join("secret").exists());

    // Outside volumes, a locked dir is no obstacle to root: it goes with what it holds.
    let outside = pod(root.path(), "locked-outside");
    let dir = outside.path.join("plugins/x/locked");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join("f"), "x").expect("write");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).expect("chmod");
    remove_pod_dir(&outside, &MountTable::default()).expect("remove");
    assert!(!outside.path.exists());
}

/// `chattr +i path`, or why it cannot be set here.
fn make_immutable(path: &Path) -> Result<(), String> {
    let out = Command::new("chattr")
        .arg("+i")
        .arg(path)
        .output()
        .map_err(|e| format!("chattr: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Clears `chattr +i` so the temp dir can go.
struct Mutable(PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn an_immutable_file_blocks_before_anything_is_removed() {
    let root = kubelet_root();
    let p = pod(root.path(), "immutable");
    let ctr = p.path.join("containers/app");
    fs::create_dir_all(&ctr).expect("mkdir");
    fs::write(p.path.join("etc-hosts"), "127.0.0.1 localhost\n").expect("write");
    let pinned = ctr.join("termination-log");
    fs::write(&pinned, "bye").expect("write");
    if let Err(why) = make_immutable(&pinned) {
        println!("SKIPPED: this filesystem cannot make a file immutable: {why}");
        return;
    }
    let _undo = Mutable(pinned.clone());
    let reason = the_reason(&p);
    assert!(
        reason.ends_with("app/termination-log is immutable (chattr +i): it cannot be removed"),
        "{reason}"
    );
    match remove_pod_dir(&p, &MountTable::default()) {
        Err(PodDirError::Blocked { .. }) => {}
        other => panic!("expected Blocked, got {other:?}"),
    }
    assert!(
        p.path.join("etc-hosts").exists(),
        "nothing goes when the removal could not finish"
    );
}

#[test]
fn names_with_newlines_or_bytes_that_are_not_utf8_are_reported_exactly() {
    let root = kubelet_root();
    for (i, name) in [&b"two\nlines"[..], b"bad\xff\xfe", b"esc\x1b[2J"]
        .iter()
        .enumerate()
    {
        let p = pod(root.path(), &format!("names-{i}"));
        let file = emptydir(&p).join(OsStr::from_bytes(name));
        fs::write(&file, "x").expect("write");
        let reason = the_reason(&p);
        let exact = from_bytes(file.as_os_str().as_bytes());
        assert_eq!(
            reason,
            format!("{exact} is a regular file in a volume directory")
        );
    }
}

/// A chain of `depth` directories named `name` under `top`, made through fds (its path is far
/// longer than `PATH_MAX`).
fn chain(top: &Path, name: &str, depth: usize) {
    fs::create_dir_all(top).expect("mkdir");
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut fd: OwnedFd = rustix::fs::open(top, flags, Perm::empty()).expect("open");
    let name = CString::new(name).expect("name");
    for _ in 0..depth {
        rustix::fs::mkdirat(&fd, name.as_c_str(), Perm::from_raw_mode(0o755)).expect("mkdirat");
        fd = rustix::fs::openat(&fd, name.as_c_str(), flags, Perm::empty()).expect("openat");
    }
}

#[test]
fn a_10000_deep_chain_is_reported_with_a_bounded_reason_and_kept() {
    // A tmpfs: 10,000 levels cost seconds on a busy journaled disk, and go at once with it.
    let root = kubelet_root();
    let _tmpfs = tmpfs::Tmpfs::mount(&root.path().join("pods"));
    let p = pod(root.path(), "deep");
    let name = "d".repeat(200);
    chain(&emptydir(&p), &name, CHAIN);
    let reason = the_reason(&p);
    assert!(reason.contains("levels down"), "{reason}");
    assert!(
        reason.chars().count() < 4096,
        "{} characters",
        reason.chars().count()
    );
    assert!(reason.contains("characters left out"), "{reason}");
    assert!(
        matches!(
            remove_pod_dir(&p, &MountTable::default()),
            Err(PodDirError::Blocked { .. })
        ),
        "never removed"
    );
    assert!(
        p.path
            .join("volumes/kubernetes.io~empty-dir/data")
            .join(&name)
            .exists()
    );
}

#[test]
fn a_pass_over_every_hostile_orphan_reports_each_and_goes_on() {
    let node = FakeNode::new();
    // A tmpfs for the chain (see above), mounted before the runtime's threads start.
    let _tmpfs = tmpfs::Tmpfs::mount(&node.kubelet_root().join("pods"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(pass_over_hostile_orphans(&node));
}

async fn pass_over_hostile_orphans(node: &Arc<FakeNode>) {
    let pods = node.kubelet_root().join("pods");
    let dir = |name: &str| PodDir {
        uid: uid_of(name),
        path: pods.join(uid_of(name)),
    };
    let (fifo, deep, names, clean) = (dir("fifo"), dir("deep"), dir("names"), dir("clean"));
    mkfifo(&emptydir(&fifo).join("pipe"));
    chain(&emptydir(&deep), "d", CHAIN);
    fs::write(emptydir(&names).join(OsStr::from_bytes(b"a\nb\xff")), "x").expect("write");
    fs::create_dir_all(emptydir(&clean)).expect("mkdir");
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::DryRun).await;
    clock.advance(Duration::from_secs(60));
    let t = Instant::now();
    let (plan, _) = r.pass(Mode::DryRun).await;
    assert!(t.elapsed() < QUICK, "the pass took {:?}", t.elapsed());

    let reason = |p: &PodDir| {
        plan.findings
            .iter()
            .find(|f| f.pod_uid == p.uid && f.category == "pod_dir")
            .filter(|f| f.kind() == FindingKind::Blocked)
            .map(|f| f.reason.clone())
            .unwrap_or_else(|| panic!("{} not blocked: {:#?}", p.uid, plan.findings))
    };
    assert!(reason(&fifo).ends_with("data/pipe is a fifo in a volume directory"));
    assert!(reason(&deep).contains("levels down"));
    assert!(reason(&names).ends_with("data/a\nb\\xff is a regular file in a volume directory"));
    assert!(
        plan.actions
            .iter()
            .any(|a| a.pod_uid == clean.uid && a.kind() == ActionKind::RemovePodDir),
        "the clean orphan is still planned: {:#?}",
        plan.actions
    );
}

#[test]
fn past_its_bounds_a_walk_says_too_large_and_nothing_is_removed() {
    let root = kubelet_root();
    let p = pod(root.path(), "large");
    let many = p.path.join("containers/app");
    fs::create_dir_all(&many).expect("mkdir");
    for i in 0..50 {
        fs::write(many.join(format!("f{i}")), "").expect("write");
    }
    let table = MountTable::default();
    let by_entries = WalkBounds {
        max_entries: 10,
        max_time: Duration::from_secs(60),
    };
    match assess_removal_within(&p, &table, by_entries).expect("assess") {
        Removal::TooLarge { entries, .. } => assert_eq!(entries, 10),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let by_time = WalkBounds {
        max_entries: u64::MAX,
        max_time: Duration::ZERO,
    };
    assert!(matches!(
        assess_removal_within(&p, &table, by_time).expect("assess"),
        Removal::TooLarge { .. }
    ));
    for bounds in [by_entries, by_time] {
        match remove_pod_dir_within(&p, &table, bounds) {
            Err(PodDirError::Blocked { reasons, .. }) => {
                assert!(
                    reasons[0].starts_with("too large to assess this pass"),
                    "{reasons:?}"
                );
            }
            other => panic!("expected Blocked, got {other:?}"),
        }
        assert_eq!(
            fs::read_dir(&many).expect("read").count(),
            50,
            "nothing removed"
        );
    }
    // Within its bounds the same tree is clean, and goes.
    assert_eq!(
        assess_removal_within(&p, &table, WalkBounds::DEFAULT).expect("assess"),
        Removal::Clean
    );
    remove_pod_dir_within(&p, &table, WalkBounds::DEFAULT).expect("remove");
    assert!(!p.path.exists());
}
