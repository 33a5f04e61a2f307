//! The mount table, from `/proc/<pid>/mountinfo`, indexed for "is anything mounted at or under this
//! path" queries.
//!
//! Our own parser rather than `procfs`'s `MountInfo`: that one takes `&str` lines (a mount point is
//! arbitrary bytes, so a non-UTF-8 path would fail the whole table) and keeps the kernel's octal
//! escapes (`\040` for a space) in the path, which would make a mount at `/a b` invisible to a query
//! for `/a b`. We need only the mount point (field 5), so the parser is a few lines over bytes.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

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

/// Mount points, sorted component-wise so that everything under a path is one contiguous run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountTable {
    /// Sorted, deduplicated mount points.
    points: Vec<PathBuf>,
}

impl MountTable {
    /// Reads and parses a mountinfo file (normally `/proc/1/mountinfo`, the host's mount namespace).
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
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // id parent major:minor root mountpoint options ... - fstype source superopts
            let mut fields = line.split(|b| *b == b' ').filter(|f| !f.is_empty());
            let point = fields.nth(4).ok_or(MountError::Parse {
                line: i + 1,
                reason: "fewer than 5 fields",
            })?;
            if !line.windows(3).any(|w| w == b" - ") {
                return Err(MountError::Parse {
                    line: i + 1,
                    reason: "no ` - ` separator",
                });
            }
            let point = unescape(point);
            if point.first() != Some(&b'/') {
                return Err(MountError::Parse {
                    line: i + 1,
                    reason: "mount point is not absolute",
                });
            }
            points.push(PathBuf::from(OsString::from_vec(point)));
        }
        Ok(Self::from_points(points))
    }

    /// A table holding exactly these mount points.
    pub fn from_points(mut points: Vec<PathBuf>) -> Self {
        // Path's Ord compares component by component, so `/a/b`, `/a/b/c`, `/a/b/d` sort together
        // and before `/a/b0`: the subtree of any path is a contiguous run.
        points.sort();
        points.dedup();
        MountTable { points }
    }

    /// Every mount point equal to `path` or below it, sorted. `O(log n + k)`.
    pub fn mounts_at_or_under(&self, path: &Path) -> Vec<PathBuf> {
        let start = self.points.partition_point(|p| p.as_path() < path);
        self.points[start..]
            .iter()
            .take_while(|p| p.starts_with(path))
            .cloned()
            .collect()
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

/// Undoes the kernel's `\ooo` escapes (space, tab, newline, backslash; any octal triple is decoded).
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && let Some(&[a, b, c]) = field.get(i + 1..i + 4)
            && [a, b, c].iter().all(|d| (b'0'..=b'7').contains(d))
            && a <= b'3'
        {
            out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}
