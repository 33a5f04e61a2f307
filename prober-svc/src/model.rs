//! The prober's view of the node: pods (one per UID, from the newest sandbox) and their
//! containers, as the sources (shim Lifecycle or containerd CRI) report them, and what their
//! probes came to.
//!
//! Sources convert their wire types into these, so workers and the manager never see a proto;
//! a container's declared ports are [`container_port::ContainerPort`]s. What the Kubernetes API
//! adds (restart policy, sidecars, readiness gate, preStop hooks) is an [`api_pod::ApiPod`] the
//! manager attaches to a pod when it has one. What a probe came to is an
//! [`outcome::Outcome`], and what a worker counts of it a [`outcome::ProbeResult`]: the
//! vocabulary the layers above share (probing, publish, the pod view, consequences), so it
//! sits here, below them all; the handlers read its output limit and a container's ports.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use self::container_port::ContainerPort;

pub mod api_pod;
pub mod container_port;
pub mod outcome;

/// Container states that matter to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Created, not started yet.
    Created,
    /// Its process runs.
    Running,
    /// It exited.
    Exited,
    /// The runtime does not know.
    Unknown,
}

/// One container instance.
#[derive(Clone, Debug)]
pub struct ContainerInfo {
    /// Runtime ID of this instance (changes on every restart).
    pub id: Arc<str>,
    /// Name in the pod spec.
    pub name: String,
    /// Restart attempt (kubelet's `metadata.attempt`).
    pub attempt: u32,
    /// State now.
    pub state: RunState,
    /// Creation time, Unix ns (orders instances of the same name).
    pub created_at_ns: i64,
    /// Start time, Unix ns (0 = not started).
    pub started_at_ns: i64,
    /// Ports from the `io.kubernetes.container.ports` annotation (for named probe ports).
    pub ports: Arc<[ContainerPort]>,
    /// Environment in declaration order (for `$(VAR)` expansion in exec probes).
    pub env: Arc<[(String, String)]>,
    /// The pod's grace period from the container annotation
    /// `io.kubernetes.pod.terminationGracePeriod`.
    pub pod_grace_seconds: Option<i64>,
    /// When kubelet asked to stop this instance (Unix ns, 0 = never): it is terminating.
    pub stop_requested_at_ns: i64,
}

/// One pod (by UID), as the newest of its sandboxes shows it.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Sandbox this view comes from.
    pub sandbox_id: String,
    /// Sandbox creation time (the newest sandbox of a UID wins), Unix ns.
    pub sandbox_created_at_ns: i64,
    /// Probe target address: the pod IP, or the node IP for a host-network sandbox.
    pub ip: Option<IpAddr>,
    /// Raw `podward.io/probes` annotation (None: the pod has no probes).
    pub probes_annotation: Option<String>,
    /// When kubelet asked to stop the sandbox (Unix ns, 0 = never): the pod is terminating.
    pub stop_requested_at_ns: i64,
    /// Container instances of this pod, by ID (shared with the source's index, not copied).
    pub containers: BTreeMap<String, Arc<ContainerInfo>>,
    /// What the Kubernetes API says of the pod, when the prober has it (sources leave `None`;
    /// the manager attaches the reflector's view).
    pub api: Option<Arc<api_pod::ApiPod>>,
}

impl PodInfo {
    /// The current instance of container `name`: the highest attempt, then the newest.
    pub fn current(&self, name: &str) -> Option<&Arc<ContainerInfo>> {
        self.containers
            .values()
            .filter(|c| c.name == name)
            .max_by_key(|c| (c.attempt, c.created_at_ns))
    }

    /// Whether the pod is terminating: kubelet asked to stop its sandbox, or the API has a
    /// deletion timestamp (kubelet's `DeletionTimestamp`).
    pub fn terminating(&self) -> bool {
        self.stop_requested_at_ns != 0 || self.api.as_ref().is_some_and(|a| a.deleting)
    }
}
