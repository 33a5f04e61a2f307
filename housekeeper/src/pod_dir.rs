//! Pod directories `<kubelet-root>/pods/<uid>`: find them, tell whether one can be removed, and
//! remove an orphan's without losing a byte of anyone's data.
//!
//! The rules come from kubelet's `cleanupOrphanedPodDirs` and the incidents that shaped it
//! (kubernetes #72257: a one-filesystem check blind to same-device bind mounts wiped volume subpaths
//! on 26 of 29 nodes; #60987: `rm -rf` of pod dirs with live volumes):
//! - nothing may be mounted at or under the dir (mount table prefix scan, checked again during the
//!   walk with `statx` mount-root, mount-id and device numbers);
//! - under `volumes/` and `volume-subpaths/` only empty directories are removed; any file there blocks
//!   the whole pod dir (except CSI's `vol_data.json` leftover next to an unmounted, empty `mount/`,
//!   kubernetes #105536);
//! - everything else is removed recursively on one filesystem, through directory fds, never
//!   following a symlink (a symlink is unlinked as a link).

mod fd;
mod walk;

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::mounts::MountTable;

pub(crate) use self::walk::{Scope, Walk};

/// One pod directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDir {
    /// The directory name, which kubelet makes the pod UID (not validated further by kubelet).
    pub uid: String,
    /// `<kubelet-root>/pods/<uid>`.
    pub path: PathBuf,
}

/// Whether a pod dir may be removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Nothing blocks removal.
    Clean,
    /// Removal would lose data or cross into a mount; the reasons say what and where.
    Blocked {
        /// One line per blocking entry (capped; the last line says how many were left out).
        reasons: Vec<String>,
    },
}

/// What `remove_pod_dir` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovalReport {
    /// Files, links and directories removed, the pod dir included.
    pub removed_entries: u64,
    /// CSI `vol_data.json` leftovers removed (kubernetes #105536).
    pub removed_csi_vol_data: Vec<PathBuf>,
}

/// Errors from reading or removing pod (and log) directories.
#[derive(Debug, thiserror::Error)]
pub enum PodDirError {
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Removal was refused; nothing was removed.
    #[error("{path}: removal blocked: {}", reasons.join("; "))]
    Blocked {
        /// The directory.
        path: PathBuf,
        /// Why.
        reasons: Vec<String>,
    },
    /// The walk met something that was not there when it was assessed (a new mount, another
    /// filesystem, a file in a volume dir, an entry swapped mid-walk); it stopped at once.
    #[error("{path}: stopped: {reason}")]
    Changed {
        /// The entry.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// The tree is deeper than the walk allows (a hostile tree must not exhaust fds or stack).
    #[error("{0}: tree too deep")]
    TooDeep(PathBuf),
    /// The path has no parent or no final component (e.g. `/` or `..`).
    #[error("{0}: not a removable directory path")]
    BadPath(PathBuf),
}

/// Lists `<kubelet_root>/pods`: directories only (by `d_type`, no stat per entry), symlinks skipped,
/// non-UTF-8 names skipped (not a UID). A missing `pods/` dir is an error, as in kubelet's
/// `TestCleanupOrphanedPodDirs` `pods-dir-not-found`: a pass must not conclude "no pods" from it.
pub fn scan_pod_dirs(kubelet_root: &Path) -> Result<Vec<PodDir>, PodDirError> {
    let pods = kubelet_root.join("pods");
    let entries = std::fs::read_dir(&pods).map_err(|source| PodDirError::Io {
        op: "read dir",
        path: pods.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| PodDirError::Io {
            op: "read dir",
            path: pods.clone(),
            source,
        })?;
        let ft = match entry.file_type() {
            Ok(ft) => ft,
            // Removed between readdir and the fallback lstat: not a pod dir any more.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(PodDirError::Io {
                    op: "stat",
                    path: entry.path(),
                    source,
                });
            }
        };
        if !ft.is_dir() {
            continue;
        }
        if let Some(uid) = entry.file_name().to_str() {
            out.push(PodDir {
                uid: uid.to_owned(),
                path: entry.path(),
            });
        }
    }
    out.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(out)
}

/// Every mount point at or under the pod dir — under its path as given and, when the kubelet root
/// is reached through a symlink (kubernetes #89635), under its resolved path too, since the mount
/// table only knows resolved paths.
pub fn mounted_volumes(dir: &PodDir, mounts: &MountTable) -> Vec<PathBuf> {
    mounts.mounts_at_or_under_resolved(&dir.path)
}

/// Read-only: walks the pod dir and says whether [`remove_pod_dir`] would remove it, and if not, why.
/// A pod dir that is gone is `Clean`.
pub fn assess_removal(dir: &PodDir, mounts: &MountTable) -> Result<Removal, PodDirError> {
    let mounted = mounted_volumes(dir, mounts);
    if !mounted.is_empty() {
        let reasons = mounted
            .iter()
            .map(|m| format!("{} is mounted", m.display()))
            .collect();
        return Ok(Removal::Blocked {
            reasons: cap(reasons),
        });
    }
    let mut walk = Walk::assess(&dir.path);
    walk.run(Scope::PodDir)?;
    // The walk caps its own reasons.
    let reasons = walk.into_reasons();
    Ok(if reasons.is_empty() {
        Removal::Clean
    } else {
        Removal::Blocked { reasons }
    })
}

/// Removes an orphan's pod dir if [`assess_removal`] says `Clean` (else `Blocked`, nothing removed),
/// re-verifying every entry during the removal walk. `mounts` must be freshly read by the caller.
pub fn remove_pod_dir(dir: &PodDir, mounts: &MountTable) -> Result<RemovalReport, PodDirError> {
    if let Removal::Blocked { reasons } = assess_removal(dir, mounts)? {
        return Err(PodDirError::Blocked {
            path: dir.path.clone(),
            reasons,
        });
    }
    let mut walk = Walk::remove(&dir.path);
    walk.run(Scope::PodDir)?;
    Ok(walk.into_report())
}

/// The most reasons reported for one dir; a tree with 40,000 files (kubernetes #38498) must not
/// produce a 40,000-line report.
const MAX_REASONS: usize = 32;

fn cap(mut reasons: Vec<String>) -> Vec<String> {
    if reasons.len() > MAX_REASONS {
        let more = reasons.len() - MAX_REASONS;
        reasons.truncate(MAX_REASONS);
        reasons.push(format!("... and {more} more"));
    }
    reasons
}
