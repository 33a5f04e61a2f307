//! kubelet's `GetAllPodsFromCgroups`: list the children of every QoS parent in every hierarchy.

use std::collections::{BTreeMap, BTreeSet};

use super::child_dirs::child_dirs;
use super::error::CgroupError;
use super::kinds::{CgroupDriver, Qos};
use super::layout::CgroupLayout;
use super::name::parse_pod_cgroup_name;
use super::pod_cgroup::PodCgroup;
use crate::node::kubelet_names::Foreign;
use crate::node::pod_dir::{DirScan, ForeignSet};

/// Every pod cgroup under the layout, one entry per UID (sorted by UID), with its path in each
/// hierarchy where it exists — see [`scan_cgroups`], without what is not kubelet's.
pub fn scan_pod_cgroups(layout: &CgroupLayout) -> Result<Vec<PodCgroup>, CgroupError> {
    scan_cgroups(layout).map(|scan| scan.found)
}

/// Every pod cgroup under the layout (one entry per UID, sorted by UID, with its path in each
/// hierarchy where it exists; a UID present in only one hierarchy counts), and every other child
/// cgroup of a QoS parent as foreign: reported, never acted on. kubelet's own QoS cgroups under
/// the pod root are neither. A foreign name is listed once, with its path in the first hierarchy
/// that has it (a v1 node repeats every cgroup in a dozen hierarchies).
///
/// A missing QoS parent is skipped; any other read error fails the whole scan, so the pass does
/// not act on a partial view. Only directory entries are looked at, and only through `d_type` (no
/// stat per entry); the files beside them are the controllers' interface files.
pub fn scan_cgroups(layout: &CgroupLayout) -> Result<DirScan<PodCgroup>, CgroupError> {
    let qos_dirs: BTreeSet<String> = Qos::ALL.iter().map(|&q| layout.qos_dir(q)).collect();
    let mut found: BTreeMap<String, PodCgroup> = BTreeMap::new();
    let mut foreign = ForeignSet::default();
    let mut foreign_seen: BTreeSet<String> = BTreeSet::new();
    for qos in Qos::ALL {
        let rel = layout.qos_dir(qos);
        for h in &layout.hierarchies {
            let dir = h.path.join(&rel);
            let Some(children) = child_dirs(&dir)? else {
                continue;
            };
            for entry in children {
                let file_name = entry.file_name();
                let child = format!("{rel}/{}", file_name.to_string_lossy());
                if qos_dirs.contains(&child) {
                    continue;
                }
                // A non-UTF-8 name cannot be a pod UID (kubelet writes UIDs as strings).
                let uid = match file_name.to_str() {
                    Some(name) => parse_pod_cgroup_name(layout.driver, name)
                        .ok_or_else(|| not_a_pod_cgroup(layout)),
                    None => Err("name is not valid UTF-8".to_owned()),
                };
                let uid = match uid {
                    Ok(uid) => uid,
                    Err(reason) => {
                        if foreign_seen.insert(child) {
                            foreign.note(Foreign {
                                path: entry.path(),
                                reason,
                            });
                        }
                        continue;
                    }
                };
                let path = entry.path();
                let pod = found.entry(uid.clone()).or_insert_with(|| PodCgroup {
                    uid,
                    qos,
                    name: child,
                    paths: Vec::new(),
                });
                if !pod.paths.contains(&path) {
                    pod.paths.push(path);
                }
            }
        }
    }
    Ok(foreign.into_scan(found.into_values().collect()))
}

/// Why a child of a QoS parent is not a pod's, in the driver's own naming.
fn not_a_pod_cgroup(layout: &CgroupLayout) -> String {
    let shape = match layout.driver {
        CgroupDriver::Cgroupfs => "pod<uid>",
        CgroupDriver::Systemd => "<parent>-pod<uid with _ for ->.slice",
    };
    format!(
        "not a pod cgroup (the {} driver names them {shape})",
        layout.driver.as_str()
    )
}
