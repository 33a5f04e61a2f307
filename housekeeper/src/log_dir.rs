//! Pod log directories `<log-root>/<namespace>_<name>_<uid>` (kubelet's `BuildPodLogsDirectory`).

use std::path::{Path, PathBuf};

use crate::mounts::MountTable;
use crate::pod_dir::{PodDirError, Scope, Walk};

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
    #[error("read dir {path}: {source}")]
    Read {
        /// The log root.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
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
}

/// Parses a log dir name. kubelet's `parsePodUIDFromLogsDirectory` takes the last `_`-separated
/// field as the UID (namespaces and pod names are DNS names, so they hold no `_`); a name without
/// `_` is the legacy `<uid>` layout. Anything else (two fields, four or more, an empty field, `.`,
/// `..`) is not a pod log dir and is left alone.
pub fn parse_log_dir_name(name: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = name.split('_').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return None;
    }
    match parts.as_slice() {
        [uid] => Some((String::new(), String::new(), (*uid).to_owned())),
        [ns, pod, uid] => Some(((*ns).to_owned(), (*pod).to_owned(), (*uid).to_owned())),
        _ => None,
    }
}

/// Lists the pod log dirs under `log_root` (directories only, by `d_type`; symlinks and non-UTF-8
/// names skipped). A missing or unreadable root is an error.
pub fn scan_log_dirs(log_root: &Path) -> Result<Vec<LogDir>, LogDirError> {
    let read_err = |source| LogDirError::Read {
        path: log_root.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(log_root).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        match entry.file_type() {
            Ok(ft) if ft.is_dir() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(read_err(e)),
        }
        let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some((namespace, name, uid)) = parse_log_dir_name(&file_name) {
            out.push(LogDir {
                namespace,
                name,
                uid,
                path: entry.path(),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes a log dir and everything in it, on one filesystem, links as links, refusing if anything
/// is mounted at or under it (by the mount table, then by a read-only walk, then per entry again
/// while removing). Returns the number of entries removed (the dir included).
pub fn remove_log_dir(dir: &LogDir, mounts: &MountTable) -> Result<u64, LogDirError> {
    let mounted = mounts.mounts_at_or_under_resolved(&dir.path);
    if !mounted.is_empty() {
        return Err(LogDirError::Mounted {
            path: dir.path.clone(),
            mounts: mounted,
        });
    }
    // Read-only pass first, so a mount the table missed stops the removal before anything goes.
    let mut assess = Walk::assess(&dir.path);
    assess.run(Scope::Tree)?;
    let reasons = assess.into_reasons();
    if !reasons.is_empty() {
        return Err(LogDirError::Blocked {
            path: dir.path.clone(),
            reasons,
        });
    }
    let mut walk = Walk::remove(&dir.path);
    walk.run(Scope::Tree)?;
    Ok(walk.into_report().removed_entries)
}
