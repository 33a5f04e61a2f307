//! Pod log directories `<log-root>/<namespace>_<name>_<uid>` (kubelet's `BuildPodLogsDirectory`).
//!
//! Only names in that exact shape (a DNS-1123 namespace and pod name, a pod UID in kubelet's shape;
//! or the legacy `<uid>`) are log dirs; everything else under the root is foreign and never
//! touched (`crate::node::kubelet_names`). kubelet's own `evictPodLogsDirectories` `RemoveAll`s any
//! entry whose last `_` field is an unknown "UID", which with a wrong `--log-root` is everything.

use std::path::{Path, PathBuf};

use crate::node::fs_error::FsError;
use crate::node::kubelet_names::{self, NameError};
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{
    DirScan, PodDirError, Removal, Scope, Verdict, Walk, WalkBounds, scan_root,
};

/// One pod log directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogDir {
    /// Pod namespace (empty for a legacy `<uid>`-only dir).
    pub namespace: String,
    /// Pod name (empty for a legacy `<uid>`-only dir).
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// The directory.
    pub path: PathBuf,
}

/// Errors from reading or removing log directories.
#[derive(Debug, thiserror::Error)]
pub enum LogDirError {
    /// The log root could not be listed.
    #[error(transparent)]
    Read(#[from] FsError),
    /// Something is mounted at or under the log dir; nothing was removed.
    #[error("{path}: mounted at or under it: {mounts:?}")]
    Mounted {
        /// The log dir.
        path: PathBuf,
        /// The mount points.
        mounts: Vec<PathBuf>,
    },
    /// The read-only walk found something on another filesystem or mount; nothing was removed.
    #[error("{path}: removal blocked: {}", reasons.join("; "))]
    Blocked {
        /// The log dir.
        path: PathBuf,
        /// What was found where.
        reasons: Vec<String>,
    },
    /// The removal walk failed or stopped.
    #[error(transparent)]
    Remove(#[from] PodDirError),
    /// The path's name is not a kubelet log dir name (or not the one it was given for); nothing
    /// was read or removed.
    #[error("{path}: not a kubelet pod log directory: {reason}")]
    NotALogDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Pod log directories found under the log root.
pub type LogDirScan = DirScan<LogDir>;

/// Parses a log dir name into `(namespace, name, uid)`; see [`kubelet_names::parse_log_dir_name`].
pub fn parse_log_dir_name(name: &str) -> Result<(String, String, String), NameError> {
    let n = kubelet_names::parse_log_dir_name(name)?;
    Ok((n.namespace, n.name, n.uid.into()))
}

/// Lists the log root: directories named in kubelet's shape are log dirs (sorted by path);
/// everything else (symlinks, files, other names) is foreign. A missing or unreadable root is an
/// error.
pub fn scan_log_dirs(log_root: &Path) -> Result<LogDirScan, LogDirError> {
    let mut scan = scan_root(log_root, |name, path| {
        let (namespace, name, uid) = parse_log_dir_name(name)?;
        Ok(LogDir {
            namespace,
            name,
            uid,
            path,
        })
    })?;
    scan.found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(scan)
}

/// Checks that `dir`'s name is a kubelet log dir name for its UID: the last line of defence for
/// every caller of [`remove_log_dir`], whatever built the `LogDir`.
fn check_log_dir(dir: &LogDir) -> Result<(), LogDirError> {
    let refuse = |reason: String| {
        Err(LogDirError::NotALogDir {
            path: dir.path.clone(),
            reason,
        })
    };
    let Some(name) = dir.path.file_name().and_then(|n| n.to_str()) else {
        return refuse("no UTF-8 final component".to_owned());
    };
    match parse_log_dir_name(name) {
        Ok((_, _, uid)) if uid == dir.uid => Ok(()),
        Ok((_, _, uid)) => refuse(format!("its UID is {uid}, not {}", dir.uid)),
        Err(e) => refuse(e.to_string()),
    }
}

/// Removes a log dir and everything in it, on one filesystem, links as links, refusing a path whose
/// name is not a kubelet log dir name (`NotALogDir`) and refusing if anything is mounted at or
/// under it (by the mount table, then by a read-only walk, then per entry again
/// while removing). Returns the number of entries removed (the dir included).
pub fn remove_log_dir(dir: &LogDir, mounts: &MountTable) -> Result<u64, LogDirError> {
    check_log_dir(dir)?;
    let mounted = mounts.mounts_at_or_under_resolved(&dir.path);
    if !mounted.is_empty() {
        return Err(LogDirError::Mounted {
            path: dir.path.clone(),
            mounts: mounted,
        });
    }
    // Read-only pass first, so a mount the table missed stops the removal before anything goes.
    let bounds = WalkBounds::DEFAULT;
    let reasons = match Walk::assess(&dir.path, bounds).run(Scope::Tree)? {
        Verdict::Clean => Vec::new(),
        Verdict::Blocked(reason) => vec![reason],
        Verdict::TooLarge { entries, took } => {
            let too_large = Removal::TooLarge { entries, took };
            too_large.kept_because(bounds).into_iter().collect()
        }
    };
    if !reasons.is_empty() {
        return Err(LogDirError::Blocked {
            path: dir.path.clone(),
            reasons,
        });
    }
    let mut walk = Walk::remove(&dir.path, bounds);
    walk.run(Scope::Tree)?;
    Ok(walk.into_report().removed_entries)
}
