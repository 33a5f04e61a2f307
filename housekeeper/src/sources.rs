//! What one pass reads, in kubelet's order, behind the [`Sources`] trait (the seam unit tests
//! replace): pod cgroups FIRST (kubelet's `HandlePodCleanups` snapshots them before it lists
//! pods, so a pod created during the pass is seen in the runtime rather than only as a cgroup),
//! then the runtime, the shim's index, pod directories, log directories and the mount table.
//!
//! Each read is timed and reported ([`SourceReport`]); a required source that fails makes the
//! whole pass plan nothing.

mod node;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::SourceReport;
use podward_api::shim::v1::Snapshot as ShimIndex;

pub use self::node::NodeSources;
use crate::cgroup::{CgroupError, CgroupLayout, PodCgroup};
use crate::log_dir::{LogDirError, LogDirScan};
use crate::mounts::{MountError, MountTable};
use crate::pod_dir::{PodDirError, PodDirScan};
use crate::runtime::{RuntimeError, RuntimeView};
use crate::shim_source::ShimError;

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
    /// Pod cgroups, one per UID.
    pub pods: Vec<PodCgroup>,
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
    let cgroups = timed(
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
        runtime,
        shim,
        pod_dirs,
        log_dirs,
        mounts,
        reports,
    }
}
