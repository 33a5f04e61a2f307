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

mod cgroups;
mod error;
mod node;
mod reader;
pub mod runtime;
pub mod shim_source;
mod source;

use std::future::Future;
use std::time::Duration;

use podward_api::housekeeper::v1::{CgroupDriverReport, SourceReport};
use podward_api::shim::v1::Snapshot as ShimIndex;

use self::cgroups::blind_scan;
pub use self::cgroups::{CgroupScan, read_cgroups};
pub use self::error::SourceError;
pub use self::node::NodeSources;
pub use self::reader::Sources;
pub use self::source::Source;
use crate::node::log_dir::LogDirScan;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::PodDirScan;
use crate::sources::runtime::RuntimeView;

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
    source: Source,
    optional: bool,
    items: impl Fn(&T) -> usize,
    fut: impl Future<Output = Result<T, SourceError>>,
) -> Option<T> {
    let start = tokio::time::Instant::now();
    let res = fut.await;
    let duration_ns = i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX);
    let mut report = SourceReport {
        name: source.as_str().to_owned(),
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
        Source::Cgroups,
        false,
        |c: &CgroupScan| c.pods.len(),
        sources.cgroups(),
    )
    .await;
    let runtime = timed(
        &mut reports,
        Source::Runtime,
        false,
        RuntimeView::len,
        sources.runtime(),
    )
    .await;
    let cgroup_driver = cgroups.as_ref().map(|c| c.detection.report());
    if let (Some(scan), Some(rt)) = (&cgroups, &runtime)
        && let Some(why) = blind_scan(scan, rt)
        && let Some(report) = reports
            .iter_mut()
            .find(|r| r.name == Source::Cgroups.as_str())
    {
        report.ok = false;
        report.items = 0;
        report.error = why;
        cgroups = None;
    }
    let shim = timed(
        &mut reports,
        Source::Shim,
        true,
        |s: &ShimIndex| s.sandboxes.len() + s.containers.len(),
        sources.shim(),
    )
    .await;
    let pod_dirs = timed(
        &mut reports,
        Source::PodDirs,
        false,
        PodDirScan::len,
        sources.pod_dirs(),
    )
    .await;
    let log_dirs = timed(
        &mut reports,
        Source::LogDirs,
        false,
        LogDirScan::len,
        sources.log_dirs(),
    )
    .await;
    let mounts = timed(
        &mut reports,
        Source::Mounts,
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
