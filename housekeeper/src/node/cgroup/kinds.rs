//! The closed sets a pod cgroup is named and found by: kubelet's cgroup driver, what decided
//! it, and the QoS class that picks a pod cgroup's parent.

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

/// What decided the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    /// containerd's CRI `RuntimeConfig`.
    RuntimeConfig,
    /// The pod cgroup root on disk.
    Layout,
    /// `--cgroup-driver`, since nothing on the node decided.
    Flag,
    /// Nothing: no answer from containerd, no pod cgroup root on disk, the flag at `auto`.
    Undecided,
}

impl FoundBy {
    /// The name used in plans and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RuntimeConfig => "runtime-config",
            Self::Layout => "layout",
            Self::Flag => "flag",
            Self::Undecided => "",
        }
    }
}

impl std::fmt::Display for FoundBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::RuntimeConfig => "containerd's CRI RuntimeConfig",
            Self::Layout => "the layout on disk",
            Self::Flag => "--cgroup-driver",
            Self::Undecided => "nothing",
        })
    }
}
