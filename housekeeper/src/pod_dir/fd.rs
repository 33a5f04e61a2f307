//! fd-relative primitives for the walk: `statx` without following links, directory listing by fd,
//! and error mapping.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::fs_error::FsError;

use rustix::fs::{AtFlags, Dir, FileType, StatxAttributes, StatxFlags};
use rustix::io::Errno;

use super::PodDirError;

/// What `statx` says about one entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub(super) kind: FileType,
    pub(super) dev: (u32, u32),
    pub(super) ino: u64,
    pub(super) mount_root: bool,
    pub(super) mnt_id: Option<u64>,
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
        Ok(s) => Ok(Some(Meta {
            kind: FileType::from_raw_mode(s.stx_mode.into()),
            dev: (s.stx_dev_major, s.stx_dev_minor),
            ino: s.stx_ino,
            mount_root: s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
                && s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT),
            mnt_id: (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id),
        })),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(io("statx", path, e)),
    }
}

/// Names in a directory, without `.` and `..`.
pub(super) fn list(fd: &OwnedFd, path: &Path) -> Result<Vec<CString>, PodDirError> {
    let mut dir = Dir::read_from(fd).map_err(|e| io("open dir", path, e))?;
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(|e| io("read dir", path, e))?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

pub(super) fn cstring(bytes: &[u8], path: &Path) -> Result<CString, PodDirError> {
    CString::new(bytes).map_err(|_| PodDirError::BadPath(path.to_path_buf()))
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
