//! Test doubles at the housekeeper's seams: a node whose filesystem parts are a temporary tree
//! (read by the real scanners through the root-path parameters) and whose runtime, shim and mount
//! table are scripted; and an actuator that records what it is asked to do.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::housekeeper::v1::ActionKind;
use podward_api::shim::v1::Snapshot as ShimIndex;
use podward_housekeeper::act::Actuator;
use podward_housekeeper::clock::ManualClock;
use podward_housekeeper::decision::plan::PlanSettings;
use podward_housekeeper::node::cgroup::{
    CgroupError, CgroupLayout, DestroyReport, DriverFlag, PodCgroup, RuntimeAnswer,
};
use podward_housekeeper::node::fs_error::FsError;
use podward_housekeeper::node::log_dir::{self, LogDir, LogDirError, LogDirScan};
use podward_housekeeper::node::mounts::MountTable;
use podward_housekeeper::node::pod_dir::{self, PodDir, PodDirError, PodDirScan, RemovalReport};
use podward_housekeeper::reconcile::Reconciler;
use podward_housekeeper::sources::runtime::{
    ContainerInfo, ContainerPhase, RuntimeError, RuntimeView, SandboxInfo,
};
use podward_housekeeper::sources::{self, CgroupScan, Source, SourceError, Sources};

/// Pod UIDs in kubelet's shape (an API server UUID) for tests that need one or two pods.
pub const U1: &str = "00000000-0000-4000-8000-000000000001";
pub const U2: &str = "00000000-0000-4000-8000-000000000002";

/// The `i`-th of many pod UIDs, in ascending order of `i`.
pub fn nth_uid(i: usize) -> String {
    format!("{i:08x}-0000-4000-8000-000000000000")
}

/// A node in a temp dir: `cgroup/` (a v2-looking tree), `kubelet/pods/`, `logs/`.
pub struct FakeNode {
    pub dir: tempfile::TempDir,
    /// Runtime answers, one per read; the last one repeats.
    pub runtime: Mutex<VecDeque<RuntimeView>>,
    pub shim: Mutex<Option<ShimIndex>>,
    pub mountinfo: Mutex<String>,
    pub failing: Mutex<HashSet<Source>>,
    /// Source names in the order they were read.
    pub reads: Mutex<Vec<Source>>,
}

impl FakeNode {
    pub fn new() -> Arc<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("cgroup/kubepods/burstable")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("cgroup/kubepods/besteffort")).expect("mkdir");
        std::fs::write(
            dir.path().join("cgroup/cgroup.controllers"),
            "cpu memory pids\n",
        )
        .expect("write");
        std::fs::create_dir_all(dir.path().join("kubelet/pods")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("logs")).expect("mkdir");
        Arc::new(Self {
            dir,
            runtime: Mutex::new(VecDeque::from([RuntimeView::default()])),
            shim: Mutex::new(None),
            mountinfo: Mutex::new(String::new()),
            failing: Mutex::new(HashSet::new()),
            reads: Mutex::new(Vec::new()),
        })
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.root().join("kubelet")
    }
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.kubelet_root().join("pods").join(uid)
    }

    /// A pod that left a cgroup, a pod dir and a log dir behind (`uid` in kubelet's shape, e.g.
    /// [`U1`], or the housekeeper rightly ignores it).
    pub fn leave_pod(&self, uid: &str) {
        std::fs::create_dir_all(
            self.root()
                .join(format!("cgroup/kubepods/burstable/pod{uid}")),
        )
        .expect("mkdir cgroup");
        std::fs::create_dir_all(
            self.pod_dir(uid)
                .join("volumes/kubernetes.io~empty-dir/data"),
        )
        .expect("mkdir pod dir");
        std::fs::create_dir_all(self.root().join(format!("logs/ns_web-{uid}_{uid}/app")))
            .expect("mkdir log dir");
    }

    /// The runtime from now on.
    pub fn set_runtime(&self, view: RuntimeView) {
        *self.runtime.lock() = VecDeque::from([view]);
    }

    /// Runtime answers for the next reads (the last one repeats).
    pub fn script_runtime(&self, views: Vec<RuntimeView>) {
        *self.runtime.lock() = views.into();
    }

    pub fn fail(&self, source: Source, failing: bool) {
        if failing {
            self.failing.lock().insert(source);
        } else {
            self.failing.lock().remove(&source);
        }
    }

    /// Adds a mount point (a line of mountinfo) at `path`.
    pub fn mount(&self, path: &Path) {
        let mut m = self.mountinfo.lock();
        let id = 100 + m.lines().count();
        m.push_str(&format!(
            "{id} 1 0:{id} / {} rw,relatime shared:1 - tmpfs tmpfs rw\n",
            path.display()
        ));
    }

    pub fn settings(&self, grace: Duration) -> PlanSettings {
        PlanSettings {
            kubelet_root: self.kubelet_root(),
            remove_exited_containers: false,
            orphan_grace: grace,
            walk: podward_housekeeper::node::pod_dir::WalkBounds::DEFAULT,
        }
    }

    fn check(&self, name: Source) -> Result<(), SourceError> {
        self.reads.lock().push(name);
        if self.failing.lock().contains(&name) {
            return Err(SourceError::Unavailable(name));
        }
        Ok(())
    }
}

pub fn sandbox(id: &str, uid: &str, attempt: u32, ready: bool) -> SandboxInfo {
    SandboxInfo {
        id: id.into(),
        uid: uid.into(),
        namespace: "ns".into(),
        name: format!("web-{uid}"),
        attempt,
        ready,
        created_at_ns: i64::from(attempt) + 1,
    }
}

pub fn container(
    id: &str,
    sandbox_id: &str,
    uid: &str,
    name: &str,
    attempt: u32,
    phase: ContainerPhase,
) -> ContainerInfo {
    ContainerInfo {
        id: id.into(),
        sandbox_id: sandbox_id.into(),
        pod_uid: uid.into(),
        name: name.into(),
        attempt,
        phase,
        created_at_ns: i64::from(attempt) + 10,
    }
}

impl Sources for FakeNode {
    async fn cgroups(&self) -> Result<CgroupScan, SourceError> {
        self.check(Source::Cgroups)?;
        sources::read_cgroups(
            &self.root().join("cgroup"),
            "/",
            DriverFlag::Auto,
            &RuntimeAnswer::Unimplemented,
            Path::new("/proc"),
        )
    }

    async fn runtime(&self) -> Result<RuntimeView, SourceError> {
        self.check(Source::Runtime)?;
        let mut q = self.runtime.lock();
        let v = if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        };
        Ok(v.unwrap_or_default())
    }

    async fn shim(&self) -> Result<ShimIndex, SourceError> {
        self.check(Source::Shim)?;
        self.shim
            .lock()
            .clone()
            .ok_or(SourceError::Unavailable(Source::Shim))
    }

    async fn pod_dirs(&self) -> Result<PodDirScan, SourceError> {
        self.check(Source::PodDirs)?;
        Ok(pod_dir::scan_pod_dirs(&self.kubelet_root())?)
    }

    async fn log_dirs(&self) -> Result<LogDirScan, SourceError> {
        self.check(Source::LogDirs)?;
        Ok(log_dir::scan_log_dirs(&self.root().join("logs"))?)
    }

    async fn mounts(&self) -> Result<MountTable, SourceError> {
        self.check(Source::Mounts)?;
        Ok(MountTable::parse(&self.mountinfo.lock())?)
    }
}

/// Records every call; removes nothing on disk unless `really` is set (then it calls the real
/// pod/log dir removal on the temp tree, and rmdirs the fake cgroup dirs).
#[derive(Default)]
pub struct RecordingActuator {
    pub calls: Mutex<Vec<String>>,
    /// UIDs whose cgroup destroy fails as Busy with these D-state pids.
    pub busy: Mutex<HashMap<String, Vec<i32>>>,
    /// UIDs whose every action fails.
    pub failing: Mutex<HashSet<String>>,
    /// While set, destroy blocks until it is cleared (to hold an action in flight).
    pub hold: Arc<Mutex<bool>>,
    pub in_destroy: AtomicUsize,
    pub max_in_destroy: AtomicUsize,
    pub really: bool,
}

impl RecordingActuator {
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }
    fn record(&self, s: String) {
        self.calls.lock().push(s);
    }
    fn fails(&self, uid: &str) -> bool {
        self.failing.lock().contains(uid)
    }
}

fn io_fail(path: &Path) -> std::io::Error {
    std::io::Error::other(format!("injected failure for {}", path.display()))
}

impl Actuator for RecordingActuator {
    fn destroy_cgroup(
        &self,
        _layout: &CgroupLayout,
        cg: &PodCgroup,
    ) -> Result<DestroyReport, CgroupError> {
        let n = self.in_destroy.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_destroy.fetch_max(n, Ordering::SeqCst);
        self.record(format!("REMOVE_CGROUP {} {}", cg.uid, cg.name));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while *self.hold.lock() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        self.in_destroy.fetch_sub(1, Ordering::SeqCst);
        if let Some(d) = self.busy.lock().get(&cg.uid) {
            return Err(CgroupError::Busy {
                name: cg.name.clone(),
                killed: d.clone(),
                d_state: d.clone(),
                remaining: d.clone(),
            });
        }
        if self.fails(&cg.uid) {
            return Err(CgroupError::Io(FsError::new(
                "rmdir",
                cg.paths[0].clone(),
                io_fail(&cg.paths[0]),
            )));
        }
        if self.really {
            for p in &cg.paths {
                std::fs::remove_dir(p).expect("rmdir fake cgroup");
            }
        }
        Ok(DestroyReport::default())
    }

    fn reduce_cpu(&self, _layout: &CgroupLayout, cg: &PodCgroup) -> Result<(), CgroupError> {
        self.record(format!("REDUCE_CPU {} {}", cg.uid, cg.name));
        Ok(())
    }

    fn remove_pod_dir(
        &self,
        dir: &PodDir,
        mounts: &MountTable,
    ) -> Result<RemovalReport, PodDirError> {
        self.record(format!("REMOVE_POD_DIR {} {}", dir.uid, dir.path.display()));
        if self.fails(&dir.uid) {
            return Err(PodDirError::Io(FsError::new(
                "remove",
                dir.path.clone(),
                io_fail(&dir.path),
            )));
        }
        if self.really {
            return pod_dir::remove_pod_dir(dir, mounts);
        }
        Ok(RemovalReport::default())
    }

    fn remove_log_dir(&self, dir: &LogDir, mounts: &MountTable) -> Result<u64, LogDirError> {
        self.record(format!("REMOVE_LOG_DIR {} {}", dir.uid, dir.path.display()));
        if self.really {
            return log_dir::remove_log_dir(dir, mounts);
        }
        Ok(0)
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(format!("REMOVE_SANDBOX {id}"));
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(format!("REMOVE_CONTAINER {id}"));
        Ok(())
    }
}

/// A reconciler over a fake node with a manual clock.
pub fn reconciler(
    node: &Arc<FakeNode>,
    act: &Arc<RecordingActuator>,
    settings: PlanSettings,
) -> (Reconciler<FakeNode, RecordingActuator>, ManualClock) {
    let clock = ManualClock::new();
    let r = Reconciler::new(node.clone(), act.clone(), Arc::new(clock.clone()), settings);
    (r, clock)
}

/// "KIND uid target" for every action of a plan (the same shape as the recorder's calls).
pub fn planned(plan: &podward_api::housekeeper::v1::Plan) -> Vec<String> {
    plan.actions
        .iter()
        .map(|a| match a.kind() {
            ActionKind::RemoveSandbox | ActionKind::RemoveContainer => {
                format!("{} {}", a.kind().as_str_name(), a.target)
            }
            k => format!("{} {} {}", k.as_str_name(), a.pod_uid, a.target),
        })
        .collect()
}
