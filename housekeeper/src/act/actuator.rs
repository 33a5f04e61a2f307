//! The destructive operations the housekeeper performs, behind one trait: the node's own
//! (`node.rs`) in the daemon, a recorder in unit tests.

use std::future::Future;

use crate::node::cgroup::{CgroupError, CgroupLayout, DestroyReport, PodCgroup};
use crate::node::log_dir::{LogDir, LogDirError};
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{PodDir, PodDirError, RemovalReport};
use crate::sources::runtime::RuntimeError;

/// The destructive operations, behind a trait so unit tests can record them.
pub trait Actuator: Send + Sync + 'static {
    /// Kill every process of a pod cgroup and remove it bottom-up.
    fn destroy_cgroup(
        &self,
        layout: &CgroupLayout,
        cg: &PodCgroup,
    ) -> Result<DestroyReport, CgroupError>;
    /// Lower a pod cgroup's CPU to the minimum.
    fn reduce_cpu(&self, layout: &CgroupLayout, cg: &PodCgroup) -> Result<(), CgroupError>;
    /// Remove a pod dir (re-assessed against `mounts`).
    fn remove_pod_dir(
        &self,
        dir: &PodDir,
        mounts: &MountTable,
    ) -> Result<RemovalReport, PodDirError>;
    /// Remove a pod log dir.
    fn remove_log_dir(&self, dir: &LogDir, mounts: &MountTable) -> Result<u64, LogDirError>;
    /// StopPodSandbox then RemovePodSandbox.
    fn remove_sandbox(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// RemoveContainer.
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
}
