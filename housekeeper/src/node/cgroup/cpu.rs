//! kubelet's `ReduceCPULimits`: an orphan whose volumes are still mounted keeps its cgroup (so
//! memory-backed volume charges are not moved to the parent) but gets the least CPU possible.

use std::io::{ErrorKind, Write};
use std::path::Path;

use super::error::CgroupError;
use super::layout::{CgroupLayout, HierarchyKind};
use super::pod_cgroup::PodCgroup;

/// kubelet's `MinShares`.
const MIN_SHARES: &str = "2";
/// `cpu.weight` for `MinShares`: `1 + ((2 - 2) * 9999) / 262142`.
const MIN_WEIGHT: &str = "1";

/// Sets `cpu.shares` to 2 (v1 `cpu` hierarchy) and `cpu.weight` to 1 (v2, when the cpu controller
/// is enabled there, i.e. the file exists). Fails with `NoCpuController` if neither file exists,
/// and with `NotAPodCgroup` (writing nothing) if a path is not this pod's own cgroup.
pub fn reduce_cpu(layout: &CgroupLayout, cg: &PodCgroup) -> Result<(), CgroupError> {
    let mut written = false;
    for path in &cg.paths {
        let h = layout.pod_hierarchy(path, &cg.uid)?;
        let (file, value) = match &h.kind {
            HierarchyKind::V1 { .. } if h.has_v1_controller("cpu") => ("cpu.shares", MIN_SHARES),
            HierarchyKind::V2 => ("cpu.weight", MIN_WEIGHT),
            HierarchyKind::V1 { .. } => continue,
        };
        if write_existing(&path.join(file), value)? {
            written = true;
        }
    }
    if written {
        Ok(())
    } else {
        Err(CgroupError::NoCpuController(cg.name.clone()))
    }
}

/// Writes `value` to an existing cgroup file (truncating, as runc does, so a fake tree reads back
/// exactly `value`); `Ok(false)` if the file does not exist. Never creates
/// a file (cgroupfs would refuse, and on a fake tree a typo must not pass silently).
pub(crate) fn write_existing(path: &Path, value: &str) -> Result<bool, CgroupError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(value.as_bytes())
                .map_err(|e| CgroupError::io("write", path, e))?;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(CgroupError::io("open", path, e)),
    }
}
