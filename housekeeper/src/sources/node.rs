//! The real sources: the node's filesystems (through the root paths in [`Config`]), containerd's
//! CRI and the shim's Lifecycle API. Blocking filesystem walks run on tokio's blocking pool.

use std::path::PathBuf;
use std::time::Duration;

use podward_api::shim::v1::Snapshot as ShimIndex;

use super::cgroups::{CgroupScan, read_cgroups};
use super::error::SourceError;
use super::reader::Sources;
use crate::config::Config;
use crate::node::cgroup::DriverFlag;
use crate::node::log_dir::{LogDirScan, scan_log_dirs};
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{PodDirScan, scan_pod_dirs};
use crate::sources::runtime::{RuntimeClient, RuntimeView};
use crate::sources::shim_source::ShimClient;

/// How long a CRI call may take before the source counts as failed.
pub(crate) const RUNTIME_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the shim may take (it is optional, so a short wait).
pub(crate) const SHIM_TIMEOUT: Duration = Duration::from_secs(3);

/// Reads the node named by a [`Config`].
#[derive(Clone, Debug)]
pub struct NodeSources {
    cgroup_root: PathBuf,
    driver: DriverFlag,
    kubelet_cgroup_root: String,
    proc_root: PathBuf,
    kubelet_root: PathBuf,
    log_root: PathBuf,
    mountinfo: PathBuf,
    runtime: RuntimeClient,
    shim: ShimClient,
}

impl NodeSources {
    /// Sources for `config`; no I/O happens until the first read.
    pub fn new(config: &Config) -> Self {
        Self {
            cgroup_root: config.cgroup_root.clone(),
            driver: config.cgroup_driver.flag(),
            kubelet_cgroup_root: config.kubelet_cgroup_root.clone(),
            proc_root: config.proc_root.clone(),
            kubelet_root: config.kubelet_root.clone(),
            log_root: config.log_root.clone(),
            mountinfo: config.mountinfo.clone(),
            runtime: RuntimeClient::new(&config.common.containerd_socket, RUNTIME_TIMEOUT),
            shim: ShimClient::new(&config.shim_socket, SHIM_TIMEOUT),
        }
    }

    /// The CRI client (the actor uses the same one to remove leaked sandboxes).
    pub fn runtime_client(&self) -> &RuntimeClient {
        &self.runtime
    }
}

impl Sources for NodeSources {
    async fn cgroups(&self) -> Result<CgroupScan, SourceError> {
        // Asked every pass (one small call): containerd may have been restarted with another
        // runtime configuration.
        let answer = self.runtime.cgroup_driver().await;
        let (root, flag, cg_root, proc_root) = (
            self.cgroup_root.clone(),
            self.driver,
            self.kubelet_cgroup_root.clone(),
            self.proc_root.clone(),
        );
        tokio::task::spawn_blocking(move || {
            read_cgroups(&root, &cg_root, flag, &answer, &proc_root)
        })
        .await?
    }

    async fn runtime(&self) -> Result<RuntimeView, SourceError> {
        Ok(self.runtime.list().await?)
    }

    async fn shim(&self) -> Result<ShimIndex, SourceError> {
        Ok(self.shim.snapshot().await?)
    }

    async fn pod_dirs(&self) -> Result<PodDirScan, SourceError> {
        let root = self.kubelet_root.clone();
        Ok(tokio::task::spawn_blocking(move || scan_pod_dirs(&root)).await??)
    }

    async fn log_dirs(&self) -> Result<LogDirScan, SourceError> {
        let root = self.log_root.clone();
        Ok(tokio::task::spawn_blocking(move || scan_log_dirs(&root)).await??)
    }

    async fn mounts(&self) -> Result<MountTable, SourceError> {
        let path = self.mountinfo.clone();
        Ok(tokio::task::spawn_blocking(move || MountTable::read(&path)).await??)
    }
}
