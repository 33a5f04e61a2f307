//! The cgroups source: decide kubelet's cgroup driver, then scan every pod cgroup with it; and
//! whether a scan that found no pod cgroup root can be trusted.

use std::path::Path;
use std::sync::Arc;

use super::error::SourceError;
use super::runtime::RuntimeView;
use crate::node::cgroup::{
    CgroupLayout, Detection, DriverFlag, PodCgroup, RuntimeAnswer, decide_driver, scan_cgroups,
};
use crate::node::pod_dir::DirScan;

/// Pod cgroups and the layout they were found in (destroy and reduce need the layout).
#[derive(Clone, Debug)]
pub struct CgroupScan {
    /// Hierarchies and naming.
    pub layout: Arc<CgroupLayout>,
    /// Pod cgroups, one per UID, and the children of QoS parents that are not kubelet's.
    pub pods: DirScan<PodCgroup>,
    /// How the driver was decided, and where the pod cgroup root was found.
    pub detection: Detection,
}

/// The cgroups source on the tree under `root`: decide the driver ([`decide_driver`]: containerd's
/// answer, the layout, the flag), then scan every pod cgroup with it. `proc_root` is where the
/// pids in `cgroup.procs` can be looked up (D-state reports). Blocking.
pub fn read_cgroups(
    root: &Path,
    kubelet_cgroup_root: &str,
    flag: DriverFlag,
    runtime: &RuntimeAnswer,
    proc_root: &Path,
) -> Result<CgroupScan, SourceError> {
    let (mut layout, detection) = decide_driver(root, kubelet_cgroup_root, flag, runtime)?;
    layout.proc_root = proc_root.to_path_buf();
    let pods = scan_cgroups(&layout)?;
    Ok(CgroupScan {
        layout: Arc::new(layout),
        pods,
        detection,
    })
}

/// Why a cgroup scan that found no pod cgroup root cannot be trusted, if the runtime says pods
/// run: their cgroups exist somewhere this source does not look.
pub(super) fn blind_scan(scan: &CgroupScan, runtime: &RuntimeView) -> Option<String> {
    let running = runtime.ready_sandboxes();
    if !scan.detection.pod_roots.is_empty() || running == 0 {
        return None;
    }
    let layout = &scan.layout;
    let expected = match scan.detection.driver {
        Some(_) => format!("no {} in any hierarchy", layout.pod_root()),
        None => {
            "neither kubepods (cgroupfs) nor kubepods.slice (systemd) in any hierarchy".to_owned()
        }
    };
    Some(format!(
        "no pod cgroup root found ({expected} under {}, --kubelet-cgroup-root={}) while the \
         runtime reports {running} running pod sandbox(es): their cgroups are somewhere this \
         source does not look; check --cgroup-root, --kubelet-cgroup-root and --cgroup-driver",
        layout.root.display(),
        layout.cgroup_root,
    ))
}
