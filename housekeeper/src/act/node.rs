//! The real actuator: the node-side removal functions, containerd's CRI, and systemd's D-Bus API
//! for pod slices when kubelet uses the systemd cgroup driver.

use std::sync::Arc;

use super::actuator::Actuator;
use crate::node::cgroup::systemd::{self, SystemdClient};
use crate::node::cgroup::{
    self, CgroupDriver, CgroupError, CgroupLayout, DestroyReport, PodCgroup,
};
use crate::node::log_dir::{self, LogDir, LogDirError};
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{self, PodDir, PodDirError, RemovalReport, WalkBounds};
use crate::sources::runtime::{RuntimeClient, RuntimeError};

/// Acts on the real node.
#[derive(Clone, Debug)]
pub struct NodeActuator {
    runtime: RuntimeClient,
    systemd: Arc<SystemdClient>,
    walk: WalkBounds,
}

impl NodeActuator {
    /// An actuator that removes sandboxes and containers through `runtime`, and stops pod slices
    /// through `systemd` when the layout's driver is systemd (connected on first use only).
    pub fn new(runtime: RuntimeClient, systemd: Arc<SystemdClient>) -> Self {
        Self {
            runtime,
            systemd,
            walk: WalkBounds::DEFAULT,
        }
    }

    /// Removes pod dirs with these walk bounds (the planner's, so a dir it planned is not
    /// refused as too large).
    pub fn with_walk_bounds(mut self, walk: WalkBounds) -> Self {
        self.walk = walk;
        self
    }
}

impl Actuator for NodeActuator {
    fn destroy_cgroup(
        &self,
        layout: &CgroupLayout,
        cg: &PodCgroup,
    ) -> Result<DestroyReport, CgroupError> {
        match layout.driver {
            CgroupDriver::Cgroupfs => cgroup::destroy(layout, cg),
            CgroupDriver::Systemd => systemd::destroy_slice(layout, cg, &self.systemd),
        }
    }

    fn reduce_cpu(&self, layout: &CgroupLayout, cg: &PodCgroup) -> Result<(), CgroupError> {
        match layout.driver {
            CgroupDriver::Cgroupfs => cgroup::reduce_cpu(layout, cg),
            CgroupDriver::Systemd => systemd::reduce_slice_cpu(layout, cg, &self.systemd),
        }
    }

    fn remove_pod_dir(
        &self,
        dir: &PodDir,
        mounts: &MountTable,
    ) -> Result<RemovalReport, PodDirError> {
        pod_dir::remove_pod_dir_within(dir, mounts, self.walk)
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
