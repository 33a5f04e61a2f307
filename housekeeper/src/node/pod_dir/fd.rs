//! fd-relative primitives for the walk: `statx` without following links, directory streams read
//! by fd in `getdents` chunks, and error mapping.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::node::fs_error::FsError;

use rustix::fs::{AtFlags, Dir, FileType, StatxAttributes, StatxFlags};
use rustix::io::Errno;

use super::error::PodDirError;

/// What `statx` says about one entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub(super) kind: FileType,
    pub(super) dev: (u32, u32),
    pub(super) ino: u64,
    pub(super) mount_root: bool,
    pub(super) mnt_id: Option<u64>,
    /// `chattr +i`: the entry cannot be unlinked (nor, for a directory, emptied).
    pub(super) immutable: bool,
    /// `chattr +a`: the entry cannot be unlinked (nor, for a directory, emptied).
    pub(super) append_only: bool,
}

/// `statx(AT_SYMLINK_NOFOLLOW)` of `name` under `dir` (an empty name means `dir` itself);
/// `None` if it is gone.
pub(super) fn stat_at(
    dir: &impl AsFd,
    name: &CStr,
    path: &Path,
) -> Result<Option<Meta>, PodDirError> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let want = StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID;
    match rustix::fs::statx(dir, name, flags | AtFlags::SYMLINK_NOFOLLOW, want) {
        Ok(s) => {
            let attr = |a: StatxAttributes| {
                s.stx_attributes_mask.contains(a) && s.stx_attributes.contains(a)
            };
            Ok(Some(Meta {
                kind: FileType::from_raw_mode(s.stx_mode.into()),
                dev: (s.stx_dev_major, s.stx_dev_minor),
                ino: s.stx_ino,
                mount_root: attr(StatxAttributes::MOUNT_ROOT),
                mnt_id: (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id),
                immutable: attr(StatxAttributes::IMMUTABLE),
                append_only: attr(StatxAttributes::APPEND),
            }))
        }
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(io("statx", path, e)),
    }
}

/// A stream over the entries of the directory open at `fd`: `getdents64` into a buffer that
/// rustix caps at a few dozen KiB, so a directory of any size costs the same memory.
pub(super) struct Entries {
    dir: Dir,
}

impl Entries {
    /// Starts reading the directory open at `fd` (from its first entry, on a fd of its own).
    pub(super) fn open(fd: &OwnedFd, path: &Path) -> Result<Self, PodDirError> {
        let dir = Dir::read_from(fd).map_err(|e| io("open dir", path, e))?;
        Ok(Self { dir })
    }

    /// Hands the next entry's name (never `.` or `..`) to `f`; `None` at the end.
    pub(super) fn next<T>(
        &mut self,
        path: &Path,
        f: impl FnOnce(&CStr) -> T,
    ) -> Option<Result<T, PodDirError>> {
        loop {
            let entry = match self.dir.read()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(io("read dir", path, e))),
            };
            let name = entry.file_name();
            if name != c"." && name != c".." {
                return Some(Ok(f(name)));
            }
        }
    }
}

/// Whether the directory open at `fd` has no entry (reads at most its first chunk).
pub(super) fn is_empty(fd: &OwnedFd, path: &Path) -> Result<bool, PodDirError> {
    Ok(Entries::open(fd, path)?
        .next(path, |_| ())
        .transpose()?
        .is_none())
}

pub(super) fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Symlink => "symlink",
        FileType::Directory => "directory",
        FileType::Socket => "socket",
        FileType::Fifo => "fifo",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "entry of unknown type",
    }
}

pub(super) fn io(op: &'static str, path: &Path, e: Errno) -> PodDirError {
    PodDirError::Io(FsError::new(op, path, e))
}
