//! The seam unit tests replace: what one pass reads from the node, one method per source.

use std::future::Future;

use podward_api::shim::v1::Snapshot as ShimIndex;

use super::cgroups::CgroupScan;
use super::error::SourceError;
use super::runtime::RuntimeView;
use crate::node::log_dir::LogDirScan;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::PodDirScan;

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
