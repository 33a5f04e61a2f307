//! The real actuator: the node-side removal functions and containerd's CRI.

use super::Actuator;
use crate::cgroup::{self, CgroupError, CgroupLayout, DestroyReport, PodCgroup};
use crate::log_dir::{self, LogDir, LogDirError};
use crate::mounts::MountTable;
use crate::pod_dir::{self, PodDir, PodDirError, RemovalReport};
use crate::runtime::{RuntimeClient, RuntimeError};

/// Acts on the real node.
#[derive(Clone, Debug)]
pub struct NodeActuator {
    runtime: RuntimeClient,
}

impl NodeActuator {
    /// An actuator that removes sandboxes and containers through `runtime`.
    pub fn new(runtime: RuntimeClient) -> Self {
        Self { runtime }
    }
}

impl Actuator for NodeActuator {
    fn destroy_cgroup(
        &self,
        layout: &CgroupLayout,
        cg: &PodCgroup,
    ) -> Result<DestroyReport, CgroupError> {
        cgroup::destroy(layout, cg)
    }

    fn reduce_cpu(&self, layout: &CgroupLayout, cg: &PodCgroup) -> Result<(), CgroupError> {
        cgroup::reduce_cpu(layout, cg)
    }

    fn remove_pod_dir(
        &self,
        dir: &PodDir,
        mounts: &MountTable,
    ) -> Result<RemovalReport, PodDirError> {
        pod_dir::remove_pod_dir(dir, mounts)
    }

    fn remove_log_dir(&self, dir: &LogDir, mounts: &MountTable) -> Result<u64, LogDirError> {
        log_dir::remove_log_dir(dir, mounts)
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.stop_and_remove_sandbox(id).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.remove_container(id).await
    }
}
