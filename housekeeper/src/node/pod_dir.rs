//! Pod directories `<kubelet-root>/pods/<uid>`: find them, tell whether one can be removed, and
//! remove an orphan's without losing a byte of anyone's data.
//!
//! The rules come from kubelet's `cleanupOrphanedPodDirs` and the incidents that shaped it
//! (kubernetes #72257: a one-filesystem check blind to same-device bind mounts wiped volume
//! subpaths on 26 of 29 nodes; #60987: `rm -rf` of pod dirs with live volumes):
//! - only `<root>/pods/<uid>` with a UID in kubelet's shape is a pod dir
//!   (`crate::node::kubelet_names`): other entries are foreign, and removal re-checks the name
//!   before reading anything;
//! - nothing may be mounted at or under the dir (mount table prefix scan, checked again during the
//!   walk with `statx` mount-root, mount-id and device numbers);
//! - under `volumes/` and `volume-subpaths/` only empty directories are removed; any file there
//!   blocks the whole pod dir (except CSI's `vol_data.json` leftover next to an unmounted, empty
//!   `mount/`, kubernetes #105536);
//! - everything else is removed recursively on one filesystem, through directory fds, never
//!   following a symlink (a symlink is unlinked as a link);
//! - an immutable or append-only entry (`chattr +i`/`+a`) blocks: removal would fail half-way.
//!
//! A pod writes what it likes into its volumes, so the walk is bounded whatever they hold
//! ([`WalkBounds`]): it streams directories, stops at the first reason not to remove, and past its
//! bounds says [`Removal::TooLarge`] — never `Clean` on a partial walk.

mod error;
mod fd;
mod shown;
mod walk;

use std::collections::BinaryHeap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::node::fs_error::FsError;
use crate::node::kubelet_names::{Foreign, NameError, PodUid};
use crate::node::mounts::MountTable;

pub use self::error::PodDirError;
pub(crate) use self::shown::shown;
pub use self::walk::{RemovalReport, WalkBounds};
pub(crate) use self::walk::{Scope, Verdict, Walk};

/// One pod directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDir {
    /// The directory name: the pod UID, in one of kubelet's shapes ([`PodUid`]). kubelet itself
    /// takes any name here; [`scan_pod_dirs`] does not, and removal checks it again.
    pub uid: String,
    /// `<kubelet-root>/pods/<uid>`.
    pub path: PathBuf,
}

/// Whether a pod dir may be removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Nothing blocks removal.
    Clean,
    /// Removal would lose data, cross into a mount, or fail half-way; the reasons say what and
    /// where: every mount the table lists under the dir (capped; the last line says how many were
    /// left out), else the first entry the walk found in the way (it stops there).
    Blocked {
        /// One line per reason.
        reasons: Vec<String>,
    },
    /// The walk reached its [`WalkBounds`] before it knew: the dir is kept, and assessed again
    /// (from the start) by the next pass.
    TooLarge {
        /// Entries looked at.
        entries: u64,
        /// Time spent.
        took: Duration,
    },
}

impl Removal {
    /// The finding's words for a dir that is kept: why.
    pub fn kept_because(&self, bounds: WalkBounds) -> Option<String> {
        match self {
            Removal::Clean => None,
            Removal::Blocked { reasons } => Some(reasons.join("; ")),
            Removal::TooLarge { entries, took } => Some(format!(
                "too large to assess this pass: no reason to keep it among the first {entries} \
                 entries ({took:.1?}), and a walk stops at {} entries or {:?}; assessed again \
                 next pass, never removed on a partial walk",
                bounds.max_entries, bounds.max_time
            )),
        }
    }
}

/// At most this many foreign entries are kept per scan (the lowest paths); the rest are counted.
/// A root flag pointing at a busy directory must not turn into an unbounded list.
pub const MAX_FOREIGN: usize = 256;

/// What a scan of a root found: kubelet's entries, and everything else (never acted on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirScan<T> {
    /// Entries in kubelet's shape.
    pub found: Vec<T>,
    /// Entries that are not, sorted by path, at most [`MAX_FOREIGN`].
    pub foreign: Vec<Foreign>,
    /// Foreign entries beyond [`MAX_FOREIGN`], counted only.
    pub foreign_unlisted: u64,
}

impl<T> Default for DirScan<T> {
    fn default() -> Self {
        Self {
            found: Vec::new(),
            foreign: Vec::new(),
            foreign_unlisted: 0,
        }
    }
}

impl<T> DirScan<T> {
    /// The number of entries in kubelet's shape.
    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// Whether no entry in kubelet's shape was found.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }
}

/// Foreign entries as a scan meets them, bounded: the lowest [`MAX_FOREIGN`] paths are kept (a
/// max-heap, so the biggest is evicted first), the rest only counted.
#[derive(Debug, Default)]
pub(crate) struct ForeignSet {
    kept: BinaryHeap<Foreign>,
    unlisted: u64,
}

impl ForeignSet {
    /// Records one foreign entry.
    pub(crate) fn note(&mut self, entry: Foreign) {
        self.kept.push(entry);
        if self.kept.len() > MAX_FOREIGN {
            self.kept.pop();
            self.unlisted += 1;
        }
    }

    /// The scan: `found` beside the foreign entries, sorted by path.
    pub(crate) fn into_scan<T>(self, found: Vec<T>) -> DirScan<T> {
        DirScan {
            found,
            foreign: self.kept.into_sorted_vec(),
            foreign_unlisted: self.unlisted,
        }
    }
}

/// Pod directories found under `<kubelet-root>/pods`.
pub type PodDirScan = DirScan<PodDir>;

/// Why a root could not be listed: the operation, the path and the OS error.
/// Lists the directory `root` and sorts every entry into kubelet's (`classify` returns `Ok`) or
/// foreign: a symlink (never followed), a non-directory, a non-UTF-8 name, a name `classify`
/// rejects. Directories only by `d_type` (no stat per entry unless the file system has none).
pub(crate) fn scan_root<T>(
    root: &Path,
    classify: impl Fn(&str, PathBuf) -> Result<T, NameError>,
) -> Result<DirScan<T>, FsError> {
    let entries = std::fs::read_dir(root).map_err(|e| FsError::new("read dir", root, e))?;
    let mut found = Vec::new();
    let mut foreign = ForeignSet::default();
    let mut note = |path: PathBuf, reason: String| foreign.note(Foreign { path, reason });
    for entry in entries {
        let entry = entry.map_err(|e| FsError::new("read dir", root, e))?;
        let ft = match entry.file_type() {
            Ok(ft) => ft,
            // Removed between readdir and the fallback lstat: gone, nothing to report.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(FsError::new("stat", entry.path(), e)),
        };
        if ft.is_symlink() {
            note(entry.path(), "a symlink (never followed)".to_owned());
            continue;
        }
        if !ft.is_dir() {
            note(entry.path(), "not a directory".to_owned());
            continue;
        }
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            note(entry.path(), "name is not valid UTF-8".to_owned());
            continue;
        };
        match classify(name, entry.path()) {
            Ok(t) => found.push(t),
            Err(e) => note(entry.path(), e.to_string()),
        }
    }
    Ok(foreign.into_scan(found))
}

/// Checks that `dir` is `<...>/pods/<uid>` with `uid` in kubelet's shape: the last line of defence
/// for every caller of [`assess_removal`] and [`remove_pod_dir`], whatever built the `PodDir`.
fn check_pod_dir(dir: &PodDir) -> Result<(), PodDirError> {
    let refuse = |reason: String| {
        Err(PodDirError::NotAPodDir {
            path: dir.path.clone(),
            reason,
        })
    };
    if let Err(e) = PodUid::parse(&dir.uid) {
        return refuse(e.to_string());
    }
    if dir.path.file_name().and_then(|n| n.to_str()) != Some(dir.uid.as_str()) {
        return refuse(format!("its name is not the UID {}", dir.uid));
    }
    let parent = dir.path.parent().and_then(Path::file_name);
    if parent.and_then(|n| n.to_str()) != Some("pods") {
        return refuse("it is not inside a `pods` directory".to_owned());
    }
    Ok(())
}

/// Lists `<kubelet_root>/pods`: directories whose name is a pod UID in kubelet's shape
/// ([`PodUid`]) are pod dirs (sorted by UID); everything else (symlinks, files, other names) is
/// foreign. A missing `pods/` dir is an error, as in kubelet's `TestCleanupOrphanedPodDirs`
/// `pods-dir-not-found`: a pass must not conclude "no pods" from it.
pub fn scan_pod_dirs(kubelet_root: &Path) -> Result<PodDirScan, PodDirError> {
    let pods = kubelet_root.join("pods");
    let mut scan = scan_root(&pods, |name, path| {
        let uid = PodUid::parse(name)?;
        Ok(PodDir {
            uid: uid.into(),
            path,
        })
    })?;
    scan.found.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(scan)
}

/// Every mount point at or under the pod dir — under its path as given and, when the kubelet root
/// is reached through a symlink (kubernetes #89635), under its resolved path too, since the mount
/// table only knows resolved paths.
pub fn mounted_volumes(dir: &PodDir, mounts: &MountTable) -> Vec<PathBuf> {
    mounts.mounts_at_or_under_resolved(&dir.path)
}

/// [`assess_removal_within`] the default [`WalkBounds`].
pub fn assess_removal(dir: &PodDir, mounts: &MountTable) -> Result<Removal, PodDirError> {
    assess_removal_within(dir, mounts, WalkBounds::DEFAULT)
}

/// Read-only: walks the pod dir and says whether [`remove_pod_dir`] would remove it, and if not,
/// why, or that it could not tell within `bounds`. A pod dir that is gone is `Clean`. A path that
/// is not a kubelet pod dir is `NotAPodDir`.
pub fn assess_removal_within(
    dir: &PodDir,
    mounts: &MountTable,
    bounds: WalkBounds,
) -> Result<Removal, PodDirError> {
    check_pod_dir(dir)?;
    let mounted = mounted_volumes(dir, mounts);
    if !mounted.is_empty() {
        let reasons = mounted
            .iter()
            .map(|m| format!("{} is mounted", shown(m)))
            .collect();
        return Ok(Removal::Blocked {
            reasons: cap(reasons),
        });
    }
    Ok(match Walk::assess(&dir.path, bounds).run(Scope::PodDir)? {
        Verdict::Clean => Removal::Clean,
        Verdict::Blocked(reason) => Removal::Blocked {
            reasons: vec![reason],
        },
        Verdict::TooLarge { entries, took } => Removal::TooLarge { entries, took },
    })
}

/// [`remove_pod_dir_within`] the default [`WalkBounds`].
pub fn remove_pod_dir(dir: &PodDir, mounts: &MountTable) -> Result<RemovalReport, PodDirError> {
    remove_pod_dir_within(dir, mounts, WalkBounds::DEFAULT)
}

/// Removes an orphan's pod dir if [`assess_removal_within`] says `Clean` (else `Blocked`, nothing
/// removed), re-verifying every entry during the removal walk. `mounts` must be freshly read by
/// the caller.
pub fn remove_pod_dir_within(
    dir: &PodDir,
    mounts: &MountTable,
    bounds: WalkBounds,
) -> Result<RemovalReport, PodDirError> {
    let verdict = assess_removal_within(dir, mounts, bounds)?;
    if let Some(why) = verdict.kept_because(bounds) {
        let reasons = match verdict {
            Removal::Blocked { reasons } => reasons,
            _ => vec![why],
        };
        return Err(PodDirError::Blocked {
            path: dir.path.clone(),
            reasons,
        });
    }
    let mut walk = Walk::remove(&dir.path, bounds);
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
