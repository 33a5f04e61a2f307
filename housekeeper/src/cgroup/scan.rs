//! kubelet's `GetAllPodsFromCgroups`: list the children of every QoS parent in every hierarchy.

use std::collections::BTreeMap;
use std::io::ErrorKind;

use super::{CgroupError, CgroupLayout, PodCgroup, Qos};

/// Every pod cgroup under the layout, one entry per UID (sorted by UID), with its path in each
/// hierarchy where it exists. A UID present in only one hierarchy counts. A missing QoS parent is
/// skipped; any other read error fails the whole scan, so the pass does not act on a partial view.
/// Only directory entries are looked at, and only through `d_type` (no stat per entry).
pub fn scan_pod_cgroups(layout: &CgroupLayout) -> Result<Vec<PodCgroup>, CgroupError> {
    let mut found: BTreeMap<String, PodCgroup> = BTreeMap::new();
    for qos in Qos::ALL {
        let rel = layout.qos_dir(qos);
        for h in &layout.hierarchies {
            let dir = h.path.join(&rel);
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(CgroupError::io("read dir", dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| CgroupError::io("read dir", &dir, e))?;
                let ft = entry
                    .file_type()
                    .map_err(|e| CgroupError::io("stat", entry.path(), e))?;
                if !ft.is_dir() {
                    continue;
                }
                // A non-UTF-8 name cannot be a pod UID (kubelet writes UIDs as strings).
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let Some(uid) = super::parse_pod_cgroup_name(layout.driver, &name) else {
                    continue;
                };
                let path = dir.join(&name);
                let pod = found.entry(uid.clone()).or_insert_with(|| PodCgroup {
                    uid,
                    qos,
                    name: format!("{rel}/{name}"),
                    paths: Vec::new(),
                });
                if !pod.paths.contains(&path) {
                    pod.paths.push(path);
                }
            }
        }
    }
    Ok(found.into_values().collect())
}
