//! The runtime as containerd's CRI plugin reports it (read directly, not through the shim): every
//! sandbox and container in every state, the cgroup driver it runs containers with
//! (`RuntimeConfig`), and the two CRI calls the housekeeper makes to remove what leaked.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::Duration;

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{
    CgroupDriver as CriCgroupDriver, ContainerState, ListContainersRequest, ListPodSandboxRequest,
    PodSandboxState, RemoveContainerRequest, RemovePodSandboxRequest, RuntimeConfigRequest,
    StopPodSandboxRequest,
};
use podward_api::labels;
use podward_api::limits::CRI_MESSAGE_BYTES;
use podward_api::outside_text::for_terminal;
use podward_api::tolerant::runtime::RuntimeReader;
use podward_api::tolerant::{Action, Decoded};
use tonic::transport::Channel;

use crate::node::cgroup::{CgroupDriver, RuntimeAnswer};

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

/// Errors from CRI calls.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// containerd answered with an error (or could not be reached: UNAVAILABLE).
    #[error("CRI {call}: {status}")]
    Rpc {
        /// The CRI method.
        call: &'static str,
        /// The gRPC status.
        #[source]
        status: tonic::Status,
    },
    /// An object in containerd's answer could not be decoded even with its invalid strings
    /// repaired, and not even its pod UID could be read: any pod could be its, so the read
    /// fails (naming the object) rather than give a view with a hole in it.
    #[error(
        "CRI {call}: objects that cannot be decoded and name no pod (no housekeeping until \
         they are fixed or removed): {ids}"
    )]
    Unreadable {
        /// The CRI method.
        call: &'static str,
        /// Their IDs (`?` when unknown).
        ids: String,
    },
    /// containerd did not answer in time.
    #[error("CRI {call}: no answer within {after:?}")]
    Timeout {
        /// The CRI method.
        call: &'static str,
        /// The deadline.
        after: Duration,
    },
}

/// A CRI client to containerd that reconnects by itself when containerd comes back.
#[derive(Clone, Debug)]
pub struct RuntimeClient {
    client: RuntimeServiceClient<Channel>,
    /// The List calls, decoded tolerantly.
    reader: RuntimeReader,
    timeout: Duration,
}

async fn inner<T>(
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    fut.await.map(tonic::Response::into_inner)
}

/// The message of a List answer, logging what was repaired (an object with a repaired string
/// is kept and acts as any other), and the pod UIDs of the objects left out. An object left out
/// whose pod cannot be told fails the read: see [`RuntimeError::Unreadable`].
fn whole<M>(call: &'static str, d: Decoded<M>) -> Result<(M, BTreeSet<String>), RuntimeError> {
    let mut held = BTreeSet::new();
    let mut unknown = Vec::new();
    for r in &d.repairs {
        match (r.action, &r.pod_uid) {
            (Action::Replaced, _) => {
                // IDs and labels in a repair are containerd's (and a pod's): escaped for the log.
                tracing::warn!(call, repair = %for_terminal(&r.to_string()),
                    "containerd's answer had an invalid field")
            }
            (Action::Dropped, Some(uid)) => {
                tracing::warn!(call, repair = %for_terminal(&r.to_string()),
                    pod_uid = %for_terminal(uid),
                    "an object in containerd's answer cannot be decoded; nothing of its pod is \
                     acted on until it can");
                held.insert(uid.clone());
            }
            (Action::Dropped, None) => unknown.push(r.object_id.as_deref().unwrap_or("?")),
        }
    }
    if !unknown.is_empty() {
        return Err(RuntimeError::Unreadable {
            call,
            ids: unknown.join(", "),
        });
    }
    Ok((d.message, held))
}

impl RuntimeClient {
    /// A lazy client for containerd's socket; no connection is made until the first call.
    pub fn new(socket: &Path, timeout: Duration) -> Self {
        let channel = podward_api::socket::channel(socket);
        let reader = RuntimeReader::new(channel.clone());
        let client =
            RuntimeServiceClient::new(channel).max_decoding_message_size(CRI_MESSAGE_BYTES);
        Self {
            client,
            reader,
            timeout,
        }
    }

    async fn call<T>(
        &self,
        call: &'static str,
        fut: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, RuntimeError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(status)) => Err(RuntimeError::Rpc { call, status }),
            Err(_) => Err(RuntimeError::Timeout {
                call,
                after: self.timeout,
            }),
        }
    }

    /// `ListPodSandbox` and `ListContainers` without filters: every state. The answers are
    /// decoded tolerantly (`podward_api::tolerant`): an object with an invalid UTF-8 string is
    /// kept with that string repaired (logged) and counts as any other. An object that cannot
    /// be decoded at all costs its pod: its `io.kubernetes.pod.uid` label, when readable, goes to
    /// [`RuntimeView::held_uids`] (that pod is no orphan and none of its objects is acted on);
    /// when not even that can be read, the read fails ([`RuntimeError::Unreadable`], naming the
    /// object): any pod could be its, and no pass may act on a view with a hole in it.
    pub async fn list(&self) -> Result<RuntimeView, RuntimeError> {
        let mut c = self.reader.clone();
        let sandboxes = self
            .call(
                "ListPodSandbox",
                c.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
            )
            .await?;
        let (sandboxes, mut held) = whole("ListPodSandbox", sandboxes)?;
        let mut c = self.reader.clone();
        let containers = self
            .call(
                "ListContainers",
                c.list_containers(ListContainersRequest { filter: None }),
            )
            .await?;
        let (containers, held_containers) = whole("ListContainers", containers)?;
        held.extend(held_containers);
        let mut view = view_from(sandboxes.items, containers.containers);
        view.held_uids = held;
        Ok(view)
    }

    /// CRI `RuntimeConfig`: the cgroup driver containerd runs containers with, read the way
    /// kubelet's `getCgroupDriverFromCRI` does (UNIMPLEMENTED or no `linux` section: the runtime
    /// does not say). Never fails: a failed call is [`RuntimeAnswer::Unavailable`].
    pub async fn cgroup_driver(&self) -> RuntimeAnswer {
        let mut c = self.client.clone();
        match self
            .call(
                "RuntimeConfig",
                inner(c.runtime_config(RuntimeConfigRequest {})),
            )
            .await
        {
            Ok(r) => answer_from(r.linux.map(|l| l.cgroup_driver)),
            Err(RuntimeError::Rpc { status, .. })
                if status.code() == tonic::Code::Unimplemented =>
            {
                RuntimeAnswer::Unimplemented
            }
            Err(e) => RuntimeAnswer::Unavailable(e.to_string()),
        }
    }

    /// StopPodSandbox then RemovePodSandbox, as kubelet's sandbox GC does (remove is skipped
    /// when stop fails). A sandbox that is already gone counts as removed.
    pub async fn stop_and_remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let mut c = self.client.clone();
        let stop = StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        match self
            .call("StopPodSandbox", inner(c.stop_pod_sandbox(stop)))
            .await
        {
            Err(RuntimeError::Rpc { status, .. }) if status.code() == tonic::Code::NotFound => {
                return Ok(());
            }
            r => r.map(drop)?,
        }
        let rm = RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        match self
            .call("RemovePodSandbox", inner(c.remove_pod_sandbox(rm)))
            .await
        {
            Err(RuntimeError::Rpc { status, .. }) if status.code() == tonic::Code::NotFound => {
                Ok(())
            }
            r => r.map(drop),
        }
    }

    /// RemoveContainer (an exited container beyond kubelet's GC policy).
    pub async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut c = self.client.clone();
        let rm = RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        match self
            .call("RemoveContainer", inner(c.remove_container(rm)))
            .await
        {
            Err(RuntimeError::Rpc { status, .. }) if status.code() == tonic::Code::NotFound => {
                Ok(())
            }
            r => r.map(drop),
        }
    }
}

/// `RuntimeConfig`'s `linux.cgroup_driver` (`None`: no `linux` section) as a driver answer. An
/// enum value this build does not know says nothing about the driver (kubelet refuses it too).
pub fn answer_from(linux_cgroup_driver: Option<i32>) -> RuntimeAnswer {
    match linux_cgroup_driver.map(CriCgroupDriver::try_from) {
        None => RuntimeAnswer::NoLinuxConfig,
        Some(Ok(CriCgroupDriver::Systemd)) => RuntimeAnswer::Driver(CgroupDriver::Systemd),
        Some(Ok(CriCgroupDriver::Cgroupfs)) => RuntimeAnswer::Driver(CgroupDriver::Cgroupfs),
        Some(Err(e)) => RuntimeAnswer::Unavailable(format!(
            "RuntimeConfig reports an unknown cgroup driver ({e})"
        )),
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
    fn runtime_config_answers_as_kubelet_reads_them() {
        assert_eq!(
            answer_from(Some(CriCgroupDriver::Systemd as i32)),
            RuntimeAnswer::Driver(CgroupDriver::Systemd)
        );
        assert_eq!(
            answer_from(Some(CriCgroupDriver::Cgroupfs as i32)),
            RuntimeAnswer::Driver(CgroupDriver::Cgroupfs)
        );
        assert_eq!(answer_from(None), RuntimeAnswer::NoLinuxConfig);
        assert!(matches!(
            answer_from(Some(7)),
            RuntimeAnswer::Unavailable(e) if e.contains("unknown cgroup driver")
        ));
    }

    #[test]
    fn an_object_left_out_costs_its_pod_and_only_an_unnamed_one_fails_the_read() {
        use podward_api::tolerant::Repair;
        let repair = |id: &str, uid: Option<&str>, action| Repair {
            field: 1,
            object_id: Some(id.to_owned()),
            pod_uid: uid.map(str::to_owned),
            reason: "PodSandbox.state: invalid wire type".to_owned(),
            action,
        };
        let d = |repairs| Decoded {
            message: 1,
            repairs,
        };
        // A repaired string keeps the object, and costs nothing else.
        let (m, held) = whole(
            "ListPodSandbox",
            d(vec![repair("sb-1", None, Action::Replaced)]),
        )
        .expect("kept");
        assert_eq!((m, held.len()), (1, 0));
        // A dropped object whose pod is known holds back that pod only.
        let (_, held) = whole(
            "ListPodSandbox",
            d(vec![repair("sb-2", Some("u-2"), Action::Dropped)]),
        )
        .expect("the read stands");
        assert_eq!(held.into_iter().collect::<Vec<_>>(), ["u-2"]);
        // One whose pod cannot be told fails the read, naming it.
        let err = whole(
            "ListPodSandbox",
            d(vec![
                repair("sb-2", Some("u-2"), Action::Dropped),
                repair("sb-3", None, Action::Dropped),
            ]),
        )
        .expect_err("a hole of unknown shape fails the read");
        let err = err.to_string();
        assert!(err.contains("sb-3") && !err.contains("sb-2"), "{err}");
    }

    #[test]
    fn a_held_uid_is_never_an_orphan() {
        let mut v = view_from(vec![], vec![]);
        v.held_uids.insert("u-held".to_owned());
        assert!(v.uids().contains("u-held"));
    }
}
