//! The one error for a failed filesystem operation on the node side: what was being done, to
//! which path, and the OS error. The cgroup, pod-directory and log-directory modules each wrap it
//! in their own error enum, so an operator reads the same `<op> <path>: <error>` from all three.

use std::path::PathBuf;

/// A filesystem operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct FsError {
    /// What was being done (`read dir`, `rmdir`, `write`, ...).
    pub op: &'static str,
    /// The path it was done to (or what stands for one, e.g. `pid 42` for a kill).
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

impl FsError {
    /// `op` on `path` failed with `source`.
    pub fn new(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<std::io::Error>,
    ) -> Self {
        Self {
            op,
            path: path.into(),
            source: source.into(),
        }
    }
}
