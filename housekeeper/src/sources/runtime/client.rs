//! The CRI client to containerd: the two List calls (decoded tolerantly), `RuntimeConfig`, and
//! the two calls that remove what leaked, each bounded by a deadline.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{
    CgroupDriver as CriCgroupDriver, ListContainersRequest, ListPodSandboxRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, RuntimeConfigRequest, StopPodSandboxRequest,
};
use podward_api::limits::CRI_MESSAGE_BYTES;
use podward_api::outside_text::for_terminal;
use podward_api::tolerant::runtime::RuntimeReader;
use podward_api::tolerant::{Action, Decoded};
use tonic::transport::Channel;

use super::view::{RuntimeView, view_from};
use crate::node::cgroup::{CgroupDriver, RuntimeAnswer};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
