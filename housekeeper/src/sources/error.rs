//! Why a source could not be read.

use super::runtime::RuntimeError;
use super::shim_source::ShimError;
use super::source::Source;
use crate::node::cgroup::CgroupError;
use crate::node::log_dir::LogDirError;
use crate::node::mounts::MountError;
use crate::node::pod_dir::PodDirError;

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
    Unavailable(Source),
}
