//! The sources one pass reads, named as reports, metrics and logs name them.

/// One source of a pass, in kubelet's reading order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Pod cgroups.
    Cgroups,
    /// containerd's CRI.
    Runtime,
    /// The shim's index.
    Shim,
    /// Pod directories.
    PodDirs,
    /// Log directories.
    LogDirs,
    /// The mount table.
    Mounts,
}

impl Source {
    /// Every source, in the order a pass reads them.
    pub const ORDER: [Source; 6] = [
        Source::Cgroups,
        Source::Runtime,
        Source::Shim,
        Source::PodDirs,
        Source::LogDirs,
        Source::Mounts,
    ];

    /// The source's name in reports (`SourceReport.name`), metrics labels and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cgroups => "cgroups",
            Self::Runtime => "runtime",
            Self::Shim => "shim",
            Self::PodDirs => "pod_dirs",
            Self::LogDirs => "log_dirs",
            Self::Mounts => "mounts",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
