//! Which cgroup hierarchies exist under a root, decided from the tree itself (not the host's
//! `/proc/mounts`), so a temporary tree or a private test hierarchy can stand in for
//! `/sys/fs/cgroup`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::CgroupError;
use super::kinds::{CgroupDriver, Qos};

/// cgroup v1, v2, or v1 controllers beside a v2 mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// v1 controller hierarchies only.
    V1,
    /// v1 controllers plus a v2 (`unified`) mount; kubelet works in v1 mode there.
    Hybrid,
    /// The unified hierarchy only.
    V2,
}

impl CgroupVersion {
    /// `v1`, `hybrid` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::Hybrid => "hybrid",
            Self::V2 => "v2",
        }
    }
}

/// The kind of one hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HierarchyKind {
    /// A cgroup v1 hierarchy with these controllers (from the directory name, e.g. `cpu,cpuacct`;
    /// the named `systemd` hierarchy has none).
    V1 {
        /// Controller names.
        controllers: Vec<String>,
    },
    /// The cgroup v2 unified hierarchy.
    V2,
}

/// One mounted hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    /// v1 or v2.
    pub kind: HierarchyKind,
    /// Its root directory, e.g. `/sys/fs/cgroup/memory` or `/sys/fs/cgroup/unified`.
    pub path: PathBuf,
}

impl Hierarchy {
    /// Whether this is a v1 hierarchy carrying `controller`.
    pub fn has_v1_controller(&self, controller: &str) -> bool {
        matches!(&self.kind, HierarchyKind::V1 { controllers } if controllers.iter().any(|c| c == controller))
    }
}

/// Where the pod cgroups live on this node and how they are named.
#[derive(Clone, Debug)]
pub struct CgroupLayout {
    /// The cgroup filesystem root, normally `/sys/fs/cgroup`.
    pub root: PathBuf,
    /// kubelet's `--cgroup-driver`.
    pub driver: CgroupDriver,
    /// kubelet's `--cgroup-root` (default `/`); `kubepods` lives under it.
    pub cgroup_root: String,
    /// Hierarchies found under `root`, sorted by path.
    pub hierarchies: Vec<Hierarchy>,
    /// `/proc` (root of the pid namespace whose pids appear in `cgroup.procs`); used to tell
    /// D-state processes apart. Default `/proc`.
    pub proc_root: PathBuf,
    /// How long `destroy` waits for killed processes to leave the cgroups before giving up with
    /// `Busy`. Default 2 s.
    pub kill_wait: Duration,
    /// `cgroup_root` parsed into kubelet's internal components (empty for `/`).
    pub(crate) root_components: Vec<String>,
}

impl CgroupLayout {
    /// Finds the hierarchies under `root` (pure v2 when `root/cgroup.controllers` exists, else
    /// every v1 controller directory and the hybrid `unified` mount below it) and names pod
    /// cgroups the way `driver` does under `cgroup_root` (kubelet's `--cgroup-root`).
    pub fn detect(
        root: &Path,
        driver: CgroupDriver,
        cgroup_root: &str,
    ) -> Result<Self, CgroupError> {
        let root_components = super::name::parse_cgroup_root(driver, cgroup_root)?;
        Ok(Self::with_hierarchies(
            root,
            driver,
            cgroup_root,
            find_hierarchies(root)?,
            root_components,
        ))
    }

    pub(crate) fn with_hierarchies(
        root: &Path,
        driver: CgroupDriver,
        cgroup_root: &str,
        hierarchies: Vec<Hierarchy>,
        root_components: Vec<String>,
    ) -> Self {
        CgroupLayout {
            root: root.to_path_buf(),
            driver,
            cgroup_root: cgroup_root.to_owned(),
            hierarchies,
            proc_root: PathBuf::from("/proc"),
            kill_wait: Duration::from_secs(2),
            root_components,
        }
    }

    /// cgroup v1, v2 or hybrid, from the hierarchies found: v2 when the root itself is the
    /// unified hierarchy (or only v2 hierarchies exist), hybrid when v1 controllers sit beside a
    /// v2 mount (kubelet then works in v1 mode), v1 otherwise.
    pub fn version(&self) -> CgroupVersion {
        version_of(&self.hierarchies)
    }

    /// The hierarchy that contains `path`, if any.
    pub fn hierarchy_of(&self, path: &Path) -> Option<&Hierarchy> {
        self.hierarchies
            .iter()
            .filter(|h| path.starts_with(&h.path))
            .max_by_key(|h| h.path.as_os_str().len())
    }

    /// The hierarchy of `path` if `path` is this very pod's cgroup there: absolute, inside a
    /// hierarchy, not its root, and named `pod<uid>` (or the slice) for `uid` under this layout's
    /// driver. Every write or removal checks this first, whoever built the
    /// [`PodCgroup`](super::pod_cgroup::PodCgroup): nothing may ever be pointed at a QoS parent, a
    /// hierarchy root or another pod.
    pub fn pod_hierarchy(&self, path: &Path, uid: &str) -> Result<&Hierarchy, CgroupError> {
        let not_pod = || CgroupError::NotAPodCgroup(path.to_path_buf());
        let hierarchy = self.hierarchy_of(path).ok_or_else(not_pod)?;
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| super::name::parse_pod_cgroup_name(self.driver, n));
        if path == hierarchy.path || named.as_deref() != Some(uid) || !path.is_absolute() {
            return Err(not_pod());
        }
        Ok(hierarchy)
    }
}

/// Finds the hierarchies under `root`: pure v2 when `root/cgroup.controllers` exists; otherwise
/// every real (non-symlink) subdirectory holding `cgroup.controllers` is v2 (the hybrid `unified`
/// mount) and every one holding `cgroup.procs` is a v1 controller hierarchy. Sorted by path.
pub(crate) fn find_hierarchies(root: &Path) -> Result<Vec<Hierarchy>, CgroupError> {
    let mut hierarchies = Vec::new();
    if root.join("cgroup.controllers").exists() {
        hierarchies.push(Hierarchy {
            kind: HierarchyKind::V2,
            path: root.to_path_buf(),
        });
        return Ok(hierarchies);
    }
    let entries = std::fs::read_dir(root).map_err(|e| CgroupError::io("read dir", root, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CgroupError::io("read dir", root, e))?;
        let ft = entry
            .file_type()
            .map_err(|e| CgroupError::io("stat", entry.path(), e))?;
        // Symlinks like `cpu -> cpu,cpuacct` name a hierarchy already listed under its real name.
        if !ft.is_dir() {
            continue;
        }
        let path = entry.path();
        if path.join("cgroup.controllers").exists() {
            hierarchies.push(Hierarchy {
                kind: HierarchyKind::V2,
                path,
            });
        } else if path.join("cgroup.procs").exists() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let controllers = name
                .split(',')
                .filter(|c| !c.is_empty() && !c.starts_with("name="))
                .filter(|c| *c != "systemd")
                .map(str::to_owned)
                .collect();
            hierarchies.push(Hierarchy {
                kind: HierarchyKind::V1 { controllers },
                path,
            });
        }
    }
    if hierarchies.is_empty() {
        return Err(CgroupError::NoHierarchy(root.to_path_buf()));
    }
    hierarchies.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(hierarchies)
}

pub(crate) fn version_of(hierarchies: &[Hierarchy]) -> CgroupVersion {
    let v2 = hierarchies.iter().any(|h| h.kind == HierarchyKind::V2);
    let v1 = hierarchies
        .iter()
        .any(|h| matches!(h.kind, HierarchyKind::V1 { .. }));
    match (v1, v2) {
        (true, true) => CgroupVersion::Hybrid,
        (false, true) => CgroupVersion::V2,
        _ => CgroupVersion::V1,
    }
}

impl CgroupLayout {
    /// The pod cgroup root relative to a hierarchy root: `kubepods` (cgroupfs) or
    /// `kubepods.slice` (systemd), with `--cgroup-root` in front. Guaranteed pods sit directly in
    /// it.
    pub fn pod_root(&self) -> String {
        self.qos_dir(Qos::Guaranteed)
    }

    /// The QoS parent relative to a hierarchy root, e.g. `kubepods/burstable` or
    /// `kubepods.slice/kubepods-burstable.slice` (with `--cgroup-root` in front).
    pub fn qos_dir(&self, qos: Qos) -> String {
        super::name::qos_dir(self.driver, &self.root_components, qos)
    }

    /// The pod cgroup name relative to a hierarchy root, as kubelet's `GetPodContainerName` builds
    /// it.
    pub fn pod_cgroup_name(&self, qos: Qos, uid: &str) -> String {
        super::name::pod_cgroup_name(self.driver, &self.root_components, qos, uid)
    }
}
