//! The view a pass decides on ([`RuntimeView`], built by [`view_from`]): every sandbox and
//! container, reduced to what the housekeeper uses.

use std::collections::{BTreeSet, HashSet};

use podward_api::cri::{ContainerState, PodSandboxState};
use podward_api::labels;

/// A sandbox, reduced to what the housekeeper decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Sandbox ID.
    pub id: String,
    /// Pod UID (metadata, else the `io.kubernetes.pod.uid` label; empty if neither).
    pub uid: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// kubelet's attempt counter for this pod's sandboxes.
    pub attempt: u32,
    /// Whether the sandbox is READY (else NOTREADY).
    pub ready: bool,
    /// Creation time, Unix nanoseconds.
    pub created_at_ns: i64,
}

/// A container's state as CRI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerPhase {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// Unknown to the runtime.
    Unknown,
}

/// A container, reduced to what the housekeeper decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Container ID.
    pub id: String,
    /// Its sandbox's ID.
    pub sandbox_id: String,
    /// Pod UID from the `io.kubernetes.pod.uid` label (empty if missing).
    pub pod_uid: String,
    /// Container name from its metadata.
    pub name: String,
    /// kubelet's attempt (restart) counter.
    pub attempt: u32,
    /// State.
    pub phase: ContainerPhase,
    /// Creation time, Unix nanoseconds.
    pub created_at_ns: i64,
}

/// Everything the runtime holds, in all states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeView {
    /// Every sandbox.
    pub sandboxes: Vec<SandboxInfo>,
    /// Every container.
    pub containers: Vec<ContainerInfo>,
    /// Pod UIDs of objects containerd listed that could not be decoded at all (their label
    /// still named the pod): nothing that could belong to such a pod is acted on this pass.
    pub held_uids: BTreeSet<String>,
}

impl RuntimeView {
    /// UIDs that have anything in the runtime (a sandbox in any state, or a container): such a
    /// pod is never an orphan.
    pub fn uids(&self) -> HashSet<String> {
        self.sandboxes
            .iter()
            .map(|s| s.uid.as_str())
            .chain(self.containers.iter().map(|c| c.pod_uid.as_str()))
            .chain(self.held_uids.iter().map(String::as_str))
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Number of objects (for the source report).
    pub fn len(&self) -> usize {
        self.sandboxes.len() + self.containers.len()
    }

    /// Whether the runtime holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sandboxes in the READY state: pods the runtime reports running.
    pub fn ready_sandboxes(&self) -> usize {
        self.sandboxes.iter().filter(|s| s.ready).count()
    }
}

/// Reduces CRI list responses to a [`RuntimeView`]. Missing metadata never panics: the UID then
/// comes from the label, or stays empty (and such an object protects no UID).
pub fn view_from(
    sandboxes: Vec<podward_api::cri::PodSandbox>,
    containers: Vec<podward_api::cri::Container>,
) -> RuntimeView {
    let sandboxes = sandboxes
        .into_iter()
        .map(|s| {
            let md = s.metadata.unwrap_or_default();
            let uid = if md.uid.is_empty() {
                s.labels.get(labels::POD_UID).cloned().unwrap_or_default()
            } else {
                md.uid
            };
            SandboxInfo {
                id: s.id,
                uid,
                namespace: md.namespace,
                name: md.name,
                attempt: md.attempt,
                ready: s.state == PodSandboxState::SandboxReady as i32,
                created_at_ns: s.created_at,
            }
        })
        .collect();
    let containers = containers
        .into_iter()
        .map(|c| {
            let md = c.metadata.unwrap_or_default();
            let phase = match ContainerState::try_from(c.state) {
                Ok(ContainerState::ContainerCreated) => ContainerPhase::Created,
                Ok(ContainerState::ContainerRunning) => ContainerPhase::Running,
                Ok(ContainerState::ContainerExited) => ContainerPhase::Exited,
                _ => ContainerPhase::Unknown,
            };
            ContainerInfo {
                pod_uid: c.labels.get(labels::POD_UID).cloned().unwrap_or_default(),
                id: c.id,
                sandbox_id: c.pod_sandbox_id,
                name: md.name,
                attempt: md.attempt,
                phase,
                created_at_ns: c.created_at,
            }
        })
        .collect();
    RuntimeView {
        sandboxes,
        containers,
        held_uids: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use podward_api::cri::{Container, PodSandbox, PodSandboxMetadata};

    use super::*;

    #[test]
    fn uid_from_metadata_or_label_and_missing_metadata_is_harmless() {
        let with_md = PodSandbox {
            id: "s1".into(),
            metadata: Some(PodSandboxMetadata {
                uid: "u1".into(),
                attempt: 2,
                ..Default::default()
            }),
            state: PodSandboxState::SandboxNotready as i32,
            ..Default::default()
        };
        let label_only = PodSandbox {
            id: "s2".into(),
            labels: HashMap::from([(labels::POD_UID.to_owned(), "u2".to_owned())]),
            ..Default::default()
        };
        let bare = PodSandbox::default();
        let c = Container {
            id: "c1".into(),
            labels: HashMap::from([(labels::POD_UID.to_owned(), "u3".to_owned())]),
            state: 2,
            ..Default::default()
        };
        let v = view_from(vec![with_md, label_only, bare], vec![c]);
        assert_eq!(v.sandboxes[0].uid, "u1");
        assert!(!v.sandboxes[0].ready, "NOTREADY sandboxes still count");
        assert_eq!(v.sandboxes[1].uid, "u2");
        assert_eq!(v.containers[0].phase, ContainerPhase::Exited);
        let uids = v.uids();
        assert_eq!(uids.len(), 3);
        assert!(uids.contains("u1") && uids.contains("u2") && uids.contains("u3"));
    }

    #[test]
    fn a_held_uid_is_never_an_orphan() {
        let mut v = view_from(vec![], vec![]);
        v.held_uids.insert("u-held".to_owned());
        assert!(v.uids().contains("u-held"));
    }
}
