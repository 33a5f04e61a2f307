//! Pod cgroups on the node: find them (both drivers, all QoS classes, cgroup v1 and v2), destroy an
//! orphan's tree (kill every process, then remove it) and lower an orphan's CPU to the minimum.
//!
//! Everything takes the cgroup filesystem root as a parameter ([`CgroupLayout::root`]), so tests
//! run against a temporary tree or a private test hierarchy and never touch the host's `kubepods`.
//! Which driver kubelet uses is decided from the node ([`decide_driver`]), not assumed. With the
//! systemd driver an orphan's slice is stopped over systemd's D-Bus API ([`systemd`]), as kubelet
//! does through libcontainer's systemd manager; cgroupfs removal (rmdir) is then only for what
//! systemd leaves behind, or for a slice systemd does not know (see `docs/housekeeper.md`).

mod child_dirs;
mod cpu;
mod driver;
mod error;
mod kill;
mod kinds;
mod layout;
mod name;
mod pod_cgroup;
mod scan;
pub mod systemd;
mod systemd_error;

pub use self::cpu::reduce_cpu;
pub use self::driver::{Detection, DriverFlag, RuntimeAnswer, decide_driver};
pub use self::error::CgroupError;
pub use self::kill::{DestroyReport, destroy, kill_processes, remove_dirs};
pub use self::kinds::{CgroupDriver, FoundBy, Qos};
pub use self::layout::{CgroupLayout, CgroupVersion, Hierarchy, HierarchyKind};
pub use self::name::parse_pod_cgroup_name;
pub use self::pod_cgroup::PodCgroup;
pub use self::scan::{scan_cgroups, scan_pod_cgroups};
