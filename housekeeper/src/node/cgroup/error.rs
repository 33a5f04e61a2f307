//! What can go wrong reading or changing pod cgroups.

use std::path::PathBuf;

use super::kinds::{CgroupDriver, FoundBy};
use super::systemd_error::SystemdError;
use crate::node::fs_error::FsError;

/// Errors from reading or changing cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A filesystem operation failed (other than a tolerated NotFound).
    #[error(transparent)]
    Io(#[from] FsError),
    /// No cgroup hierarchy was found under the root.
    #[error("no cgroup hierarchy found under {0}")]
    NoHierarchy(PathBuf),
    /// `--cgroup-root` is not a usable cgroup path.
    #[error("invalid cgroup root {0:?}: {1}")]
    InvalidCgroupRoot(String, &'static str),
    /// A path handed to `destroy`/`reduce_cpu` is not inside one of the layout's hierarchies.
    #[error("{0} is not a pod cgroup under this layout")]
    NotAPodCgroup(PathBuf),
    /// Processes survived the kill within the bounded wait; D-state ones are listed apart.
    #[error(
        "cgroup {name} still has processes after kill: {remaining:?} (in D state: {d_state:?})"
    )]
    Busy {
        /// The pod cgroup name.
        name: String,
        /// Pids that were sent SIGKILL.
        killed: Vec<i32>,
        /// Pids still present, in uninterruptible sleep (D state).
        d_state: Vec<i32>,
        /// Every pid still present.
        remaining: Vec<i32>,
    },
    /// No cpu.shares (v1) or cpu.weight (v2) file exists for the pod cgroup.
    #[error("no cpu controller file for {0}")]
    NoCpuController(String),
    /// `--cgroup-driver` names one driver and the node shows the other.
    #[error(
        "--cgroup-driver={flag} contradicts the node: {found_by} says {found} ({evidence}); \
         fix the flag or set it to auto"
    )]
    DriverMismatch {
        /// The flag's driver.
        flag: CgroupDriver,
        /// What the node shows.
        found: CgroupDriver,
        /// Where it was found.
        found_by: FoundBy,
        /// What was seen, in plain words.
        evidence: String,
    },
    /// Both pod cgroup roots are on disk, and neither containerd nor the flag decides.
    #[error(
        "both pod cgroup roots are on disk ({cgroupfs} and {systemd}) and containerd does not \
         report the driver: set --cgroup-driver"
    )]
    AmbiguousLayout {
        /// The cgroupfs root found (`.../kubepods`).
        cgroupfs: PathBuf,
        /// The systemd root found (`.../kubepods.slice`).
        systemd: PathBuf,
    },
    /// systemd's D-Bus API failed (systemd driver).
    #[error(transparent)]
    Systemd(#[from] SystemdError),
}

impl CgroupError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CgroupError::Io(FsError::new(op, path, source))
    }
}
