//! What executing one planned action does on the node.

use std::sync::Arc;

use crate::node::cgroup::{CgroupLayout, PodCgroup};
use crate::node::log_dir::LogDir;
use crate::node::pod_dir::PodDir;

/// What executing one action does (the data the act needs, beside the wire `Action`).
#[derive(Clone, Debug)]
pub enum Op {
    /// Kill and remove an orphan's pod cgroup.
    DestroyCgroup {
        /// Where it lives.
        layout: Arc<CgroupLayout>,
        /// The cgroup.
        cgroup: PodCgroup,
    },
    /// Lower an orphan's CPU (volumes still mounted).
    ReduceCpu {
        /// Where it lives.
        layout: Arc<CgroupLayout>,
        /// The cgroup.
        cgroup: PodCgroup,
    },
    /// Remove an orphan's pod dir.
    RemovePodDir(PodDir),
    /// Remove an orphan's log dir.
    RemoveLogDir(LogDir),
    /// Stop and remove a leaked sandbox.
    RemoveSandbox(String),
    /// Remove an exited container.
    RemoveContainer(String),
}

impl Op {
    /// Whether the act must first re-verify that the UID is still absent from the runtime
    /// (every orphan rule; not leaked sandboxes or containers, whose pod is present by nature).
    pub fn needs_uid_absent(&self) -> bool {
        !matches!(self, Op::RemoveSandbox(_) | Op::RemoveContainer(_))
    }
}
