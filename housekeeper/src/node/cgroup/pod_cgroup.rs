//! One pod cgroup as a scan finds it: the pod's UID and QoS class, its name and its paths.

use std::path::PathBuf;

use super::kinds::Qos;

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
