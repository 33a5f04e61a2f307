//! What one pass reads, in kubelet's order, behind the [`Sources`] trait (the seam unit tests
//! replace): pod cgroups FIRST (kubelet's `HandlePodCleanups` snapshots them before it lists
//! pods, so a pod created during the pass is seen in the runtime rather than only as a cgroup),
//! then the runtime, the shim's index, pod directories, log directories and the mount table.
//!
//! Each read is timed and reported ([`SourceReport`]); a required source that fails makes the
//! whole pass plan nothing. The cgroups source also fails when it found no pod cgroup root at all
//! while the runtime reports running pods: it would otherwise say "ok, 0 items" on a node whose
//! cgroups it simply cannot see (a wrong driver, root or mount), and the plan says why instead.
//!
//! The sources layer: what the housekeeper reads. The runtime ([`runtime`], containerd's CRI
//! plugin, read directly) and the shim's index ([`shim_source`]) live here; the node's own
//! filesystem is read through [`crate::node`]. Nothing here decides or acts.

mod node;
pub mod runtime;
pub mod shim_source;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::{CgroupDriverReport, SourceReport};
use podward_api::shim::v1::Snapshot as ShimIndex;

pub use self::node::NodeSources;
use crate::node::cgroup::{
    CgroupError, CgroupLayout, Detection, DriverFlag, PodCgroup, RuntimeAnswer, decide_driver,
    scan_cgroups,
};
use crate::node::log_dir::{LogDirError, LogDirScan};
use crate::node::mounts::{MountError, MountTable};
use crate::node::pod_dir::{DirScan, PodDirError, PodDirScan};
use crate::sources::runtime::{RuntimeError, RuntimeView};
use crate::sources::shim_source::ShimError;

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Pod cgroups.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// containerd's CRI.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The shim's index.
    #[error(transparent)]
    Shim(#[from] ShimError),
    /// Pod directories.
    #[error(transparent)]
    PodDirs(#[from] PodDirError),
    /// Log directories.
    #[error(transparent)]
    LogDirs(#[from] LogDirError),
    /// The mount table.
    #[error(transparent)]
    Mounts(#[from] MountError),
    /// A blocking read was cancelled or panicked.
    #[error("reader task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A test double reporting that its source is down.
    #[error("{0} unavailable")]
    Unavailable(&'static str),
}

/// Pod cgroups and the layout they were found in (destroy and reduce need the layout).
#[derive(Clone, Debug)]
pub struct CgroupScan {
    /// Hierarchies and naming.
    pub layout: Arc<CgroupLayout>,
    /// Pod cgroups, one per UID, and the children of QoS parents that are not kubelet's.
    pub pods: DirScan<PodCgroup>,
    /// How the driver was decided, and where the pod cgroup root was found.
    pub detection: Detection,
}

/// The cgroups source on the tree under `root`: decide the driver ([`decide_driver`]: containerd's
/// answer, the layout, the flag), then scan every pod cgroup with it. `proc_root` is where the
/// pids in `cgroup.procs` can be looked up (D-state reports). Blocking.
pub fn read_cgroups(
    root: &Path,
    kubelet_cgroup_root: &str,
    flag: DriverFlag,
    runtime: &RuntimeAnswer,
    proc_root: &Path,
) -> Result<CgroupScan, SourceError> {
    let (mut layout, detection) = decide_driver(root, kubelet_cgroup_root, flag, runtime)?;
    layout.proc_root = proc_root.to_path_buf();
    let pods = scan_cgroups(&layout)?;
    Ok(CgroupScan {
        layout: Arc::new(layout),
        pods,
        detection,
    })
}

/// Why a cgroup scan that found no pod cgroup root cannot be trusted, if the runtime says pods
/// run: their cgroups exist somewhere this source does not look.
fn blind_scan(scan: &CgroupScan, runtime: &RuntimeView) -> Option<String> {
    let running = runtime.ready_sandboxes();
    if !scan.detection.pod_roots.is_empty() || running == 0 {
        return None;
    }
    let layout = &scan.layout;
    let expected = match scan.detection.driver {
        Some(_) => format!("no {} in any hierarchy", layout.pod_root()),
        None => {
            "neither kubepods (cgroupfs) nor kubepods.slice (systemd) in any hierarchy".to_owned()
        }
    };
    Some(format!(
        "no pod cgroup root found ({expected} under {}, --kubelet-cgroup-root={}) while the \
         runtime reports {running} running pod sandbox(es): their cgroups are somewhere this \
         source does not look; check --cgroup-root, --kubelet-cgroup-root and --cgroup-driver",
        layout.root.display(),
        layout.cgroup_root,
    ))
}

/// The node's state as read by one pass's sources. The actor also re-reads the runtime and the
/// mount table through the same trait right before each destructive act.
pub trait Sources: Send + Sync + 'static {
    /// Pod cgroups (all QoS classes, every hierarchy).
    fn cgroups(&self) -> impl Future<Output = Result<CgroupScan, SourceError>> + Send;
    /// Every sandbox and container, all states.
    fn runtime(&self) -> impl Future<Output = Result<RuntimeView, SourceError>> + Send;
    /// The shim's index (optional source).
    fn shim(&self) -> impl Future<Output = Result<ShimIndex, SourceError>> + Send;
    /// `<kubelet-root>/pods/<uid>` directories (and the foreign entries beside them).
    fn pod_dirs(&self) -> impl Future<Output = Result<PodDirScan, SourceError>> + Send;
    /// `<log-root>/<ns>_<name>_<uid>` directories (and the foreign entries beside them).
    fn log_dirs(&self) -> impl Future<Output = Result<LogDirScan, SourceError>> + Send;
    /// The host's mount table.
    fn mounts(&self) -> impl Future<Output = Result<MountTable, SourceError>> + Send;
}

/// Source names as they appear in reports, metrics and logs.
pub mod names {
    /// Pod cgroups.
    pub const CGROUPS: &str = "cgroups";
    /// containerd's CRI.
    pub const RUNTIME: &str = "runtime";
    /// The shim's index.
    pub const SHIM: &str = "shim";
    /// Pod directories.
    pub const POD_DIRS: &str = "pod_dirs";
    /// Log directories.
    pub const LOG_DIRS: &str = "log_dirs";
    /// The mount table.
    pub const MOUNTS: &str = "mounts";
}

/// One pass's reads. A `None` means that source failed (its report says why).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Pod cgroups.
    pub cgroups: Option<CgroupScan>,
    /// The cgroup driver and how it was decided (`None` if the cgroups source failed before).
    pub cgroup_driver: Option<CgroupDriverReport>,
    /// The runtime.
    pub runtime: Option<RuntimeView>,
    /// The shim's index (optional).
    pub shim: Option<ShimIndex>,
    /// Pod directories.
    pub pod_dirs: Option<PodDirScan>,
    /// Log directories.
    pub log_dirs: Option<LogDirScan>,
    /// The mount table.
    pub mounts: Option<MountTable>,
    /// One report per source, in reading order.
    pub reports: Vec<SourceReport>,
}

impl Snapshot {
    /// Whether every required source was read (kubelet's `sourcesReady`).
    pub fn required_ok(&self) -> bool {
        self.reports.iter().all(|r| r.ok || r.optional)
    }

    /// Total time spent reading.
    pub fn read_duration(&self) -> Duration {
        self.reports
            .iter()
            .map(|r| Duration::from_nanos(u64::try_from(r.duration_ns).unwrap_or(0)))
            .sum()
    }
}

async fn timed<T>(
    reports: &mut Vec<SourceReport>,
    name: &str,
    optional: bool,
    items: impl Fn(&T) -> usize,
    fut: impl Future<Output = Result<T, SourceError>>,
) -> Option<T> {
    let start = tokio::time::Instant::now();
    let res = fut.await;
    let duration_ns = i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX);
    let mut report = SourceReport {
        name: name.to_owned(),
        duration_ns,
        optional,
        ..Default::default()
    };
    let out = match res {
        Ok(v) => {
            report.ok = true;
            report.items = items(&v) as u64;
            Some(v)
        }
        Err(e) => {
            report.error = e.to_string();
            None
        }
    };
    reports.push(report);
    out
}

/// Reads every source, in kubelet's order, one after the other (the order is the point: the
/// cgroup snapshot must predate the runtime list).
pub async fn read_all<S: Sources>(sources: &S) -> Snapshot {
    let mut reports = Vec::with_capacity(6);
    let mut cgroups = timed(
        &mut reports,
        names::CGROUPS,
        false,
        |c: &CgroupScan| c.pods.len(),
        sources.cgroups(),
    )
    .await;
    let runtime = timed(
        &mut reports,
        names::RUNTIME,
        false,
        RuntimeView::len,
        sources.runtime(),
    )
    .await;
    let cgroup_driver = cgroups.as_ref().map(|c| c.detection.report());
    if let (Some(scan), Some(rt)) = (&cgroups, &runtime)
        && let Some(why) = blind_scan(scan, rt)
        && let Some(report) = reports.iter_mut().find(|r| r.name == names::CGROUPS)
    {
        report.ok = false;
        report.items = 0;
        report.error = why;
        cgroups = None;
    }
    let shim = timed(
        &mut reports,
        names::SHIM,
        true,
        |s: &ShimIndex| s.sandboxes.len() + s.containers.len(),
        sources.shim(),
    )
    .await;
    let pod_dirs = timed(
        &mut reports,
        names::POD_DIRS,
        false,
        PodDirScan::len,
        sources.pod_dirs(),
    )
    .await;
    let log_dirs = timed(
        &mut reports,
        names::LOG_DIRS,
        false,
        LogDirScan::len,
        sources.log_dirs(),
    )
    .await;
    let mounts = timed(
        &mut reports,
        names::MOUNTS,
        false,
        MountTable::len,
        sources.mounts(),
    )
    .await;
    Snapshot {
        cgroups,
        cgroup_driver,
        runtime,
        shim,
        pod_dirs,
        log_dirs,
        mounts,
        reports,
    }
}
