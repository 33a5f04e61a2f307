//! Pod cgroups on the node: find them (both drivers, all QoS classes, cgroup v1 and v2), destroy an
//! orphan's tree (kill every process, then remove it) and lower an orphan's CPU to the minimum.
//!
//! Everything takes the cgroup filesystem root as a parameter ([`CgroupLayout::root`]), so tests run
//! against a temporary tree or a private test hierarchy and never touch the host's `kubepods`.
//! Which driver kubelet uses is decided from the node ([`decide_driver`]), not assumed. With the
//! systemd driver an orphan's slice is stopped over systemd's D-Bus API ([`systemd`]), as kubelet
//! does through libcontainer's systemd manager; cgroupfs removal (rmdir) is then only for what
//! systemd leaves behind, or for a slice systemd does not know (see `docs/housekeeper.md`).

mod cpu;
mod driver;
mod kill;
mod layout;
mod name;
mod scan;
pub mod systemd;

use std::path::PathBuf;

pub use self::cpu::reduce_cpu;
pub use self::driver::{
    CgroupVersion, Detection, DriverFlag, FoundBy, RuntimeAnswer, decide_driver,
};
pub use self::kill::{DestroyReport, destroy, kill_processes, remove_dirs};
pub use self::layout::{CgroupLayout, Hierarchy, HierarchyKind};
pub use self::name::parse_pod_cgroup_name;
pub use self::scan::{scan_cgroups, scan_pod_cgroups};
use crate::node::fs_error::FsError;

/// How kubelet names cgroups (`--cgroup-driver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// Plain paths: `kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// Slices: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
    Systemd,
}

impl CgroupDriver {
    /// kubelet's name for the driver (`--cgroup-driver` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroupfs => "cgroupfs",
            Self::Systemd => "systemd",
        }
    }
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pod's QoS class, which decides the parent cgroup of its pod cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Qos {
    /// Pod cgroup directly under `kubepods`.
    Guaranteed,
    /// Pod cgroup under `kubepods/burstable`.
    Burstable,
    /// Pod cgroup under `kubepods/besteffort`.
    BestEffort,
}

impl Qos {
    /// All classes, in the order kubelet's `GetAllPodsFromCgroups` visits them.
    pub const ALL: [Qos; 3] = [Qos::BestEffort, Qos::Burstable, Qos::Guaranteed];
}

/// One pod cgroup found on the node, merged over every hierarchy where it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroup {
    /// The pod UID parsed from the cgroup name (systemd's `_` turned back into `-`).
    pub uid: String,
    /// The QoS class whose parent held it.
    pub qos: Qos,
    /// Name relative to a hierarchy root, e.g. `kubepods/burstable/pod<uid>` (cgroupfs) or
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` (systemd).
    pub name: String,
    /// Absolute path of the pod cgroup in every hierarchy (v1 controllers and v2) where it exists.
    pub paths: Vec<PathBuf>,
}

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
    Systemd(#[from] systemd::SystemdError),
}

impl CgroupError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CgroupError::Io(FsError::new(op, path, source))
    }
}
