//! The mount table, from `/proc/<pid>/mountinfo`, indexed for "is anything mounted at or under this
//! path" queries.
//!
//! Our own parser rather than `procfs`'s `MountInfo`: that one takes `&str` lines (a mount point is
//! arbitrary bytes, so a non-UTF-8 path would fail the whole table) and keeps the kernel's octal
//! escapes (`\040` for a space) in the path, which would make a mount at `/a b` invisible to a
//! query for `/a b`. We need only the mount point (field 5), so the parser is a few lines over
//! bytes.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// Errors reading or parsing a mount table.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The file could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The mountinfo path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line does not have the mountinfo shape.
    #[error("mountinfo line {line}: {reason}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Mount points, sorted by a byte key in which `/` sorts before every other byte, so that
/// everything under a path is one contiguous run found by binary search.
#[derive(Debug, Default)]
pub struct MountTable {
    /// (key, mount point), sorted and deduplicated by key.
    points: Vec<(Vec<u8>, PathBuf)>,
    /// Resolved (symlink-free) forms of the few parent dirs queried through
    /// [`MountTable::mounts_at_or_under_resolved`]: all pod dirs share one parent, so a pass
    /// resolves it once instead of 10,000 times. Bounded; lives as long as this (per-pass) table.
    resolved: Mutex<Vec<(PathBuf, Option<PathBuf>)>>,
}

/// Distinct parents remembered by one table.
const MAX_RESOLVED: usize = 16;

impl Clone for MountTable {
    fn clone(&self) -> Self {
        MountTable {
            points: self.points.clone(),
            resolved: Mutex::new(self.resolved.lock().clone()),
        }
    }
}

impl PartialEq for MountTable {
    fn eq(&self, other: &Self) -> bool {
        self.points == other.points
    }
}

impl Eq for MountTable {}

impl MountTable {
    /// Reads and parses a mountinfo file (normally `/proc/1/mountinfo`, the host's mount
    /// namespace).
    pub fn read(path: &Path) -> Result<Self, MountError> {
        let bytes = std::fs::read(path).map_err(|source| MountError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_bytes(&bytes)
    }

    /// Parses mountinfo text.
    pub fn parse(text: &str) -> Result<Self, MountError> {
        Self::parse_bytes(text.as_bytes())
    }

    /// Parses mountinfo bytes (mount points need not be UTF-8).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, MountError> {
        let mut points = Vec::new();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let err = |reason| MountError::Parse {
                line: i + 1,
                reason,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // id parent major:minor root mountpoint options [optional...] - fstype source superopts
            let mut fields = line.split(|b| *b == b' ');
            let point = fields.nth(4).ok_or(err("fewer than 5 fields"))?;
            if !fields.any(|f| f == b"-") {
                return Err(err("no `-` separator"));
            }
            let point = podward_api::mountinfo::unescape(point);
            if point.first() != Some(&b'/') {
                return Err(err("mount point is not absolute"));
            }
            points.push(PathBuf::from(OsString::from_vec(point)));
        }
        Ok(Self::from_points(points))
    }

    /// A table holding exactly these mount points.
    pub fn from_points(points: Vec<PathBuf>) -> Self {
        let mut points: Vec<(Vec<u8>, PathBuf)> =
            points.into_iter().map(|p| (key(&p), p)).collect();
        points.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        points.dedup_by(|a, b| a.0 == b.0);
        MountTable {
            points,
            resolved: Mutex::default(),
        }
    }

    /// Every mount point equal to `path` or below it (by path component), sorted. `O(log n + k)`.
    pub fn mounts_at_or_under(&self, path: &Path) -> Vec<PathBuf> {
        let k = key(path);
        let start = self
            .points
            .partition_point(|(p, _)| p.as_slice() < k.as_slice());
        self.points[start..]
            .iter()
            .take_while(|(p, _)| p.starts_with(&k) && (p.len() == k.len() || p[k.len()] == 0))
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Like [`MountTable::mounts_at_or_under`], plus the mounts under the path with its parent
    /// resolved through symlinks: the kernel's table holds resolved paths only, so a kubelet root
    /// reached through a symlink (kubernetes #89635) would otherwise look mount-free. The last
    /// component is not resolved (callers never follow a symlink there).
    pub fn mounts_at_or_under_resolved(&self, path: &Path) -> Vec<PathBuf> {
        let mut found = self.mounts_at_or_under(path);
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name())
            && let Some(real) = self.resolve(parent)
            && real != parent
        {
            found.extend(self.mounts_at_or_under(&real.join(name)));
            found.sort();
            found.dedup();
        }
        found
    }

    fn resolve(&self, dir: &Path) -> Option<PathBuf> {
        let mut cache = self.resolved.lock();
        if let Some((_, real)) = cache.iter().find(|(d, _)| d == dir) {
            return real.clone();
        }
        let real = std::fs::canonicalize(dir).ok();
        if cache.len() >= MAX_RESOLVED {
            cache.clear();
        }
        cache.push((dir.to_path_buf(), real.clone()));
        real
    }

    /// Number of distinct mount points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// Sort key of a path: its normal components, each preceded by a 0 byte (standing for `/`). With
/// `/` below every other byte, `/a/b`, `/a/b/c` sort before `/a/b-x` and `/a/b0`, so a subtree is
/// contiguous; `.`/`..`/repeated and trailing slashes are normalised away like `Path` does.
fn key(path: &Path) -> Vec<u8> {
    let mut k = Vec::with_capacity(path.as_os_str().len());
    for c in path.components() {
        if let std::path::Component::Normal(c) = c {
            k.push(0);
            k.extend_from_slice(c.as_bytes());
        }
    }
    k
}
