//! What the index is told and what it answers: an [`Observation`] goes in, the [`Change`]s it
//! made come out, in order.

use podward_api::cri;
use podward_api::shim::v1::{Container, ContainerEventKind, Delivery, Sandbox, SandboxEventKind};

/// One thing the shim learned, from the CRI path, containerd's events or a rebuild.
#[derive(Debug, Clone)]
pub enum Observation {
    /// RunPodSandbox succeeded; `delivery` says whether the caller got the answer.
    SandboxRun {
        /// The request's config.
        config: cri::PodSandboxConfig,
        /// Runtime handler requested.
        runtime_handler: String,
        /// The new sandbox's ID.
        sandbox_id: String,
        /// Whether the response reached the caller.
        delivery: Delivery,
        /// When the call completed.
        at_ns: i64,
    },
    /// The caller of RunPodSandbox went away before containerd answered: if a sandbox with this
    /// metadata appears later, kubelet never learned of it.
    SandboxRunAbandoned {
        /// Metadata of the abandoned request.
        metadata: cri::PodSandboxMetadata,
    },
    /// A StopPodSandbox request was seen (`completed = false`) or succeeded (`true`).
    SandboxStop {
        /// Sandbox ID.
        id: String,
        /// When the request was seen.
        requested_at_ns: i64,
        /// Whether containerd completed it.
        completed: bool,
    },
    /// RemovePodSandbox succeeded.
    SandboxRemove {
        /// Sandbox ID.
        id: String,
    },
    /// CreateContainer succeeded.
    ContainerCreate {
        /// Sandbox the container belongs to.
        sandbox_id: String,
        /// The request's container config.
        config: cri::ContainerConfig,
        /// The new container's ID.
        container_id: String,
        /// Whether the response reached the caller.
        delivery: Delivery,
        /// When the call completed.
        at_ns: i64,
    },
    /// The caller of CreateContainer went away before containerd answered.
    ContainerCreateAbandoned {
        /// Sandbox the container would belong to.
        sandbox_id: String,
        /// Metadata of the abandoned request.
        metadata: cri::ContainerMetadata,
    },
    /// StartContainer succeeded.
    ContainerStart {
        /// Container ID.
        id: String,
        /// When the call completed.
        at_ns: i64,
    },
    /// A StopContainer request was seen (`completed = false`) or succeeded (`true`).
    ContainerStop {
        /// Container ID.
        id: String,
        /// Timeout (grace period, seconds) of the request.
        timeout_seconds: i64,
        /// When the request was seen.
        requested_at_ns: i64,
        /// Whether containerd completed it.
        completed: bool,
    },
    /// RemoveContainer succeeded.
    ContainerRemove {
        /// Container ID.
        id: String,
    },
    /// A ListPodSandbox response; `complete` when the request had no filter (absent = removed,
    /// unless known to exist after `listed_at_ns`).
    SandboxList {
        /// Sandboxes listed.
        items: Vec<cri::PodSandbox>,
        /// Whether this is the whole set.
        complete: bool,
        /// When the request was sent to containerd (Unix ns).
        listed_at_ns: i64,
    },
    /// A ListContainers response; `complete` when the request had no filter.
    ContainerList {
        /// Containers listed.
        items: Vec<cri::Container>,
        /// Whether this is the whole set.
        complete: bool,
        /// When the request was sent to containerd (Unix ns).
        listed_at_ns: i64,
    },
    /// A PodSandboxStatus response.
    SandboxStatus {
        /// The status.
        status: cri::PodSandboxStatus,
        /// Host network, if known (from the verbose info).
        host_network: Option<bool>,
    },
    /// A ContainerStatus response.
    ContainerStatus {
        /// The status.
        status: cri::ContainerStatus,
        /// Sandbox ID, when known (verbose info).
        sandbox_id: Option<String>,
        /// Environment, when known (verbose info's OCI spec).
        envs: Option<Vec<(String, String)>>,
    },
    /// Kept fields of these entries were past their bound (`keep`): they are marked truncated.
    Truncated {
        /// Sandbox IDs.
        sandbox_ids: Vec<String>,
        /// Container IDs.
        container_ids: Vec<String>,
    },
    /// containerd: a task's init process exited.
    TaskExit {
        /// containerd container ID (= CRI container or sandbox ID).
        container_id: String,
        /// Exit status.
        exit_code: i32,
        /// Exit time.
        exited_at_ns: i64,
    },
    /// containerd: the task was OOM-killed.
    TaskOom {
        /// containerd container ID.
        container_id: String,
    },
    /// containerd: the container record was deleted.
    ContainerDeleted {
        /// containerd container ID.
        id: String,
    },
    /// A full rebuild from the runtime: replaces the index, keeping what only the CRI path knew
    /// (delivery, stop requests, env).
    Rebuilt {
        /// Every sandbox.
        sandboxes: Vec<Sandbox>,
        /// Every container.
        containers: Vec<Container>,
    },
    /// A relist from the runtime while a connection is not observed: the objects that are new
    /// or changed, read whole (List + Status), and the IDs of every object listed. An object
    /// missing from the list is removed only if it was created before the list was taken and
    /// not known to exist shortly before (`index/lists.rs`, `LIST_GRACE_NS`).
    Relisted {
        /// New or changed sandboxes.
        sandboxes: Vec<Sandbox>,
        /// New or changed containers.
        containers: Vec<Container>,
        /// Every sandbox ID listed.
        sandbox_ids: std::collections::HashSet<String>,
        /// Every container ID listed.
        container_ids: std::collections::HashSet<String>,
        /// When the List calls were made (Unix ns).
        listed_at_ns: i64,
    },
}

/// One change to the index, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A sandbox changed; the sandbox as it is after the change.
    Sandbox(SandboxEventKind, Sandbox),
    /// A container changed; the container as it is after the change.
    Container(ContainerEventKind, Container),
}
