//! The one directory read the cgroup scans share: the directories directly below a cgroup.

use std::fs::DirEntry;
use std::io::ErrorKind;
use std::path::Path;

use super::error::CgroupError;

/// The directories directly in `dir` (its child cgroups; the files beside them are the
/// controllers' interface files). `None` when `dir` is gone: a cgroup may be removed at any time.
pub(super) fn child_dirs(dir: &Path) -> Result<Option<Vec<DirEntry>>, CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CgroupError::io("read dir", dir, e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CgroupError::io("read dir", dir, e))?;
        if entry
            .file_type()
            .map_err(|e| CgroupError::io("stat", entry.path(), e))?
            .is_dir()
        {
            dirs.push(entry);
        }
    }
    Ok(Some(dirs))
}
