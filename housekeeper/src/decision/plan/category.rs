//! The categories of what the housekeeper finds and acts on, as findings, metrics labels and
//! logs name them.

use podward_api::housekeeper::v1::ActionKind;

/// What a finding or an action is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Pod cgroups.
    Cgroup,
    /// Pod directories.
    PodDir,
    /// Pod log directories.
    LogDir,
    /// Leaked sandboxes.
    Sandbox,
    /// Exited containers beyond kubelet's GC policy.
    Container,
}

impl Category {
    /// Every category, in the order metrics and counts list them.
    pub const ALL: [Category; 5] = [
        Category::Cgroup,
        Category::PodDir,
        Category::LogDir,
        Category::Sandbox,
        Category::Container,
    ];

    /// The category's name in findings (`Finding.category`), metrics labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroup => "cgroup",
            Self::PodDir => "pod_dir",
            Self::LogDir => "log_dir",
            Self::Sandbox => "sandbox",
            Self::Container => "container",
        }
    }

    /// The category an action kind belongs to.
    pub fn of(kind: ActionKind) -> Self {
        match kind {
            ActionKind::RemoveCgroup | ActionKind::ReduceCpu => Self::Cgroup,
            ActionKind::RemovePodDir => Self::PodDir,
            ActionKind::RemoveLogDir => Self::LogDir,
            ActionKind::RemoveSandbox => Self::Sandbox,
            ActionKind::RemoveContainer | ActionKind::Unspecified => Self::Container,
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
