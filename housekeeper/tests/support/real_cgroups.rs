//! Private test hierarchies `podward-test-<id>` on the host's real cgroup mounts, with real
//! processes in them, bind-mounted under a temp dir that becomes the layout's root (in a private
//! mount namespace), so detection sees exactly the test hierarchies and the host's own
//! `kubepods` can never be touched. Everything is killed, thawed, removed and unmounted in
//! `Drop`, even when an assertion fails. Needs root.
//!
//! - [`TestCgroups::hybrid`]: v1 `cpu`, `memory`, `pids`, `freezer` plus the v2 `unified` mount,
//!   as on the development machines (cgroup v1 controllers beside a v2 mount);
//! - [`TestCgroups::v2`]: the v2 hierarchy alone, as the layout's root: a pure cgroup v2 node.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use podward_housekeeper::node::cgroup::{CgroupDriver, CgroupLayout};

#[path = "mount_ns.rs"]
mod mount_ns;

/// The hybrid set, relative to `/sys/fs/cgroup`.
pub const HIERARCHIES: [&str; 5] = ["cpu", "memory", "pids", "freezer", "unified"];

/// Test hierarchies under one temp root.
pub struct TestCgroups {
    root: tempfile::TempDir,
    /// Host directories created for the test (`.../podward-test-<id>`).
    bases: Vec<PathBuf>,
    /// Where each base is mounted under the temp root.
    targets: Vec<PathBuf>,
    /// The layout's root.
    layout_root: PathBuf,
    children: Vec<Child>,
}

/// The host's v2 hierarchy: `/sys/fs/cgroup` itself (pure v2) or its hybrid `unified` mount.
pub fn v2_mount() -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        root.to_path_buf()
    } else {
        root.join("unified")
    }
}

impl TestCgroups {
    fn private_ns() {
        // A private mount namespace for this test thread: bind mounts vanish with it at the latest.
        mount_ns::enter_private();
    }

    fn id() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        format!("podward-test-{}-{nanos}", std::process::id())
    }

    fn bind(&mut self, base: PathBuf, target: PathBuf) {
        fs::create_dir(&base).expect("mkdir test hierarchy");
        self.bases.push(base.clone());
        fs::create_dir_all(&target).expect("mkdir mount point");
        mount(
            Some(&base),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .expect("bind test hierarchy");
        self.targets.push(target);
    }

    fn empty() -> Self {
        Self::private_ns();
        let root = tempfile::tempdir().expect("tempdir");
        let layout_root = root.path().to_path_buf();
        TestCgroups {
            root,
            bases: Vec::new(),
            targets: Vec::new(),
            layout_root,
            children: Vec::new(),
        }
    }

    /// v1 controllers plus the v2 mount, each at `<root>/<name>`.
    pub fn hybrid() -> Self {
        let mut me = Self::empty();
        let id = Self::id();
        for h in HIERARCHIES {
            let base = Path::new("/sys/fs/cgroup").join(h).join(&id);
            let target = me.root.path().join(h);
            me.bind(base, target);
        }
        me
    }

    /// The v2 hierarchy alone at `<root>/v2`, which is the layout's root (pure v2).
    pub fn v2() -> Self {
        let mut me = Self::empty();
        let target = me.root.path().join("v2");
        me.bind(v2_mount().join(Self::id()), target.clone());
        me.layout_root = target;
        me
    }

    /// The layout's root.
    pub fn root(&self) -> &Path {
        &self.layout_root
    }

    pub fn layout(&self, driver: CgroupDriver) -> CgroupLayout {
        let mut layout = CgroupLayout::detect(self.root(), driver, "/").expect("detect");
        layout.kill_wait = Duration::from_secs(5);
        layout
    }

    /// `rel` in every test hierarchy.
    pub fn paths(&self, rel: &str) -> Vec<PathBuf> {
        self.targets.iter().map(|t| t.join(rel)).collect()
    }

    /// Creates `rel` in every hierarchy.
    pub fn mkcg(&self, rel: &str) {
        for p in self.paths(rel) {
            fs::create_dir_all(p).expect("mkdir cgroup");
        }
    }

    /// Starts a `sleep` and moves it into `rel` in every hierarchy.
    pub fn spawn_in(&mut self, rel: &str) -> i32 {
        let child = Command::new("sleep")
            .arg("1000")
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        self.children.push(child);
        for p in self.paths(rel) {
            fs::write(p.join("cgroup.procs"), pid.to_string()).expect("move pid");
        }
        pid
    }

    /// The hierarchies (mount point names) where `rel` exists.
    pub fn exists_anywhere(&self, rel: &str) -> Vec<String> {
        self.targets
            .iter()
            .filter(|t| t.join(rel).exists())
            .map(|t| t.file_name().expect("name").to_string_lossy().into_owned())
            .collect()
    }

    /// Waits (bounded) for the child with `pid` to exit and returns its signal.
    pub fn wait_signal(&mut self, pid: i32) -> Option<i32> {
        let child = self
            .children
            .iter_mut()
            .find(|c| c.id() as i32 == pid)
            .expect("child");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.signal();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    pub fn alive(&mut self, pid: i32) -> bool {
        let child = self
            .children
            .iter_mut()
            .find(|c| c.id() as i32 == pid)
            .expect("child");
        child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        // Thaw first: a frozen task cannot die.
        for base in &self.bases {
            if base.starts_with("/sys/fs/cgroup/freezer") {
                for dir in dirs_deepest_first(base).iter().rev() {
                    let _ = fs::write(dir.join("freezer.state"), "THAWED");
                }
            } else if base.join("cgroup.freeze").exists() {
                for dir in dirs_deepest_first(base).iter().rev() {
                    let _ = fs::write(dir.join("cgroup.freeze"), "0");
                }
            }
        }
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for base in &self.bases {
            for dir in dirs_deepest_first(base) {
                let deadline = Instant::now() + Duration::from_secs(2);
                while fs::remove_dir(&dir).is_err() && dir.exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        for t in &self.targets {
            let _ = umount2(t, MntFlags::MNT_DETACH);
        }
    }
}

pub fn dirs_deepest_first(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        out.push(d);
    }
    out.reverse();
    out
}
