//! Pod cgroups where kubelet puts them with the cgroupfs driver and cgroups per QoS class (its
//! defaults): `kubepods` under the node's cgroup root, the `burstable` and `besteffort` classes
//! under it (Guaranteed pods sit in `kubepods` itself), and `pod<uid>` under the pod's class. Like
//! kubelet's `podContainerManager.EnsureExists`, the pod cgroup is made in every hierarchy before
//! `RunPodSandbox`, whose `cgroup_parent` then names it; runc puts each container in a child of it.
//! The node's teardown removes the whole tree with the node's cgroup parent.

use std::path::Path;

use super::spec::PodSpec;
use crate::error::HarnessError;

/// kubelet's QoS class of a pod (`v1qos.GetPodQOS`), reduced to the resources the driver sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    /// Every container has equal CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit, but not Guaranteed.
    Burstable,
    /// No request or limit at all.
    BestEffort,
}

impl QosClass {
    /// The class's directory under `kubepods` (`None` for Guaranteed: `kubepods` itself).
    pub fn dir(self) -> Option<&'static str> {
        match self {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        }
    }
}

impl PodSpec {
    /// The pod's QoS class: the driver only sets memory limits, and a memory limit without a CPU
    /// limit is Burstable; no limit at all is BestEffort.
    pub fn qos_class(&self) -> QosClass {
        if self
            .containers
            .iter()
            .any(|c| c.security.memory_limit.is_some())
        {
            QosClass::Burstable
        } else {
            QosClass::BestEffort
        }
    }

    /// Runs the pod in a pod cgroup placed as kubelet places it (see [`kubelet_cgroup_parent`])
    /// instead of directly in the node's cgroup parent.
    pub fn kubelet_cgroups(mut self) -> Self {
        self.kubelet_cgroups = true;
        self
    }
}

/// The `cgroup_parent` kubelet passes for `spec` when its `--cgroup-root` is `cgroup_root` (a
/// [`crate::node::TestNode::cgroup_parent`]): `<cgroup_root>/kubepods/<class>/pod<uid>`.
pub fn kubelet_cgroup_parent(cgroup_root: &str, spec: &PodSpec) -> String {
    let mut p = format!("{}/kubepods", cgroup_root.trim_end_matches('/'));
    if let Some(class) = spec.qos_class().dir() {
        p.push('/');
        p.push_str(class);
    }
    format!("{p}/pod{}", spec.uid)
}

/// Creates `parent` (a cgroupfs path such as `/podward-e2e-<id>/kubepods/besteffort/pod<uid>`)
/// and its ancestors in every hierarchy under `fs_root` (`/sys/fs/cgroup`), as kubelet does for
/// the QoS classes at start and for a pod before its sandbox. In the v1 cpuset hierarchy a new
/// cgroup starts with no CPUs and no memory nodes, which would refuse every process, so each
/// new level gets its parent's (what libcontainer does when kubelet creates it).
pub(crate) fn ensure(fs_root: &Path, parent: &str) -> Result<(), HarnessError> {
    for hierarchy in crate::cleanup::hierarchies_under(fs_root) {
        let mut dir = hierarchy.clone();
        for part in parent.split('/').filter(|p| !p.is_empty()) {
            let up = dir.clone();
            dir.push(part);
            if dir.is_dir() {
                continue;
            }
            std::fs::create_dir(&dir).map_err(HarnessError::io("create cgroup", &dir))?;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let mine = dir.join(file);
                let empty = std::fs::read_to_string(&mine).is_ok_and(|v| v.trim().is_empty());
                if empty {
                    let theirs = std::fs::read_to_string(up.join(file))
                        .map_err(HarnessError::io("read", &up.join(file)))?;
                    std::fs::write(&mine, theirs.trim())
                        .map_err(HarnessError::io("write", &mine))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ContainerSpec;
    use crate::SecurityContext;

    #[test]
    fn kubelet_parents_by_qos_class() {
        let spec = PodSpec::new("a").uid("u-1");
        assert_eq!(
            kubelet_cgroup_parent("/podward-e2e-x", &spec),
            "/podward-e2e-x/kubepods/besteffort/podu-1"
        );
        let limited = spec.container(ContainerSpec::new("c", &["true"]).security(
            SecurityContext {
                memory_limit: Some(1 << 26),
                ..Default::default()
            },
        ));
        assert_eq!(
            kubelet_cgroup_parent("/podward-e2e-x/", &limited),
            "/podward-e2e-x/kubepods/burstable/podu-1"
        );
    }
}
