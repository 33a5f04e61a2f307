//! What can go wrong reading or removing pod (and log) directories.

use std::path::PathBuf;

use super::shown::shown;
use crate::node::fs_error::FsError;

/// Errors from reading or removing pod (and log) directories.
#[derive(Debug, thiserror::Error)]
pub enum PodDirError {
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] FsError),
    /// Removal was refused; nothing was removed.
    #[error("{}: removal blocked: {}", shown(path), reasons.join("; "))]
    Blocked {
        /// The directory.
        path: PathBuf,
        /// Why.
        reasons: Vec<String>,
    },
    /// The walk met something that was not there when it was assessed (a new mount, another
    /// filesystem, a file in a volume dir, an entry swapped mid-walk); it stopped at once.
    #[error("{}: stopped: {reason}", shown(path))]
    Changed {
        /// The entry.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// The tree is deeper than the walk allows (a hostile tree must not exhaust fds or stack).
    #[error("{}: tree too deep", shown(.0))]
    TooDeep(PathBuf),
    /// A removing walk reached its [`WalkBounds`](super::WalkBounds) (the tree grew since it was
    /// assessed); what it removed before was removable by the rules, the rest stays.
    #[error(
        "{}: stopped after {entries} entries: over the walk's bounds",
        shown(path)
    )]
    TooLarge {
        /// The dir.
        path: PathBuf,
        /// Entries looked at.
        entries: u64,
    },
    /// The path has no parent or no final component (e.g. `/` or `..`).
    #[error("{0}: not a removable directory path")]
    BadPath(PathBuf),
    /// The path is not `<root>/pods/<uid>` with a UID in kubelet's shape (or does not match the
    /// UID it was given for); nothing was read or removed.
    #[error("{path}: not a kubelet pod directory: {reason}")]
    NotAPodDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
