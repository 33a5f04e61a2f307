//! The lifecycle index: every sandbox and container the shim knows of, as `podward.shim.v1`
//! messages, and the ordered changes that observations make to it.
//!
//! The index is a pure state machine: [`Index::apply`] folds one [`Observation`] in and returns
//! the changes it made, in order. It does no I/O and reads no clock (every time comes in the
//! observation), so it is tested without containerd. Sequence numbers are assigned by the
//! publisher, which holds the index behind its lock.

mod convert;
mod cri_calls;
mod lists;
mod packed;
mod runtime_events;
#[cfg(test)]
mod tests;
use std::collections::{HashMap, VecDeque};

use podward_api::cri;
use podward_api::shim::v1::{
    Container, ContainerEventKind, Delivery, Sandbox, SandboxEventKind, Snapshot,
};

/// How many abandoned calls (caller gone before containerd answered) are remembered, to recognise
/// their result when it shows up in a later List or event.
const ABANDONED_MEMORY: usize = 256;

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

/// Metadata of a RunPodSandbox or CreateContainer whose caller left before the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Abandoned {
    Sandbox {
        name: String,
        namespace: String,
        uid: String,
        attempt: u32,
    },
    Container {
        sandbox_id: String,
        name: String,
        attempt: u32,
    },
}

/// The fields of a [`Container`] that scans over every container (and a relist's check of each
/// listed one) read: decoding an entry as this skips its labels, annotations and environment.
/// Tags as in `podward.shim.v1.Container`.
#[derive(Clone, PartialEq, prost::Message)]
struct ContainerScan {
    #[prost(string, tag = "2")]
    sandbox_id: String,
    #[prost(int32, tag = "6")]
    state: i32,
    #[prost(int64, tag = "11")]
    created_at_ns: i64,
    #[prost(int64, tag = "13")]
    finished_at_ns: i64,
}

/// The fields of a [`Sandbox`] that scans over every sandbox (and a relist's check of each
/// listed one) read. Tags as in `podward.shim.v1.Sandbox`.
#[derive(Clone, PartialEq, prost::Message)]
struct SandboxScan {
    #[prost(int32, tag = "6")]
    state: i32,
    #[prost(int64, tag = "12")]
    created_at_ns: i64,
}

/// Sandboxes and containers by ID, each kept in its protobuf encoding (`index/packed.rs` says
/// why).
#[derive(Debug, Default)]
pub struct Index {
    sandboxes: packed::Table<Sandbox>,
    containers: packed::Table<Container>,
    pub(crate) abandoned: VecDeque<Abandoned>,
    /// Per entry ID, the latest time it is known to have existed in containerd (its creating
    /// call completed, a List holding it was sent): a List sent before that never removes it.
    existed_at: HashMap<String, i64>,
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of sandboxes.
    pub fn sandbox_count(&self) -> usize {
        self.sandboxes.len()
    }

    /// Number of containers.
    pub fn container_count(&self) -> usize {
        self.containers.len()
    }

    /// A copy of a sandbox, by ID.
    pub fn sandbox(&self, id: &str) -> Option<Sandbox> {
        self.sandboxes.get(id)
    }

    /// A copy of a container, by ID.
    pub fn container(&self, id: &str) -> Option<Container> {
        self.containers.get(id)
    }

    /// The whole index (sorted by creation time, then ID) with the given header fields.
    pub fn snapshot(
        &self,
        seq: u64,
        instance_id: &str,
        connected: bool,
        resync: bool,
        now_ns: i64,
    ) -> Snapshot {
        let mut sandboxes: Vec<Sandbox> = self.sandboxes.values().collect();
        sandboxes.sort_by(|a, b| (a.created_at_ns, &a.id).cmp(&(b.created_at_ns, &b.id)));
        let mut containers: Vec<Container> = self.containers.values().collect();
        containers.sort_by(|a, b| (a.created_at_ns, &a.id).cmp(&(b.created_at_ns, &b.id)));
        Snapshot {
            seq,
            instance_id: instance_id.to_owned(),
            sandboxes,
            containers,
            runtime_connected: connected,
            resync,
            taken_at_ns: now_ns,
            ..Snapshot::default()
        }
    }

    /// Folds `obs` into the index and returns the changes it made, in order.
    // Long, but flat: one arm per kind of observation, side by side every way the index changes.
    pub fn apply(&mut self, obs: Observation) -> Vec<Change> {
        let mut out = Vec::new();
        match obs {
            Observation::SandboxRun {
                config,
                runtime_handler,
                sandbox_id,
                delivery,
                at_ns,
            } => self.sandbox_run(
                config,
                runtime_handler,
                sandbox_id,
                delivery,
                at_ns,
                &mut out,
            ),
            Observation::SandboxRunAbandoned { metadata } => self.remember(Abandoned::Sandbox {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                attempt: metadata.attempt,
            }),
            Observation::SandboxStop {
                id,
                requested_at_ns,
                completed,
            } => self.sandbox_stop(&id, requested_at_ns, completed, &mut out),
            Observation::SandboxRemove { id } => self.sandbox_remove(&id, &mut out),
            Observation::ContainerCreate {
                sandbox_id,
                config,
                container_id,
                delivery,
                at_ns,
            } => self.container_create(sandbox_id, config, container_id, delivery, at_ns, &mut out),
            Observation::ContainerCreateAbandoned {
                sandbox_id,
                metadata,
            } => self.remember(Abandoned::Container {
                sandbox_id,
                name: metadata.name,
                attempt: metadata.attempt,
            }),
            Observation::ContainerStart { id, at_ns } => self.container_start(&id, at_ns, &mut out),
            Observation::ContainerStop {
                id,
                timeout_seconds,
                requested_at_ns,
                completed,
            } => self.container_stop(&id, timeout_seconds, requested_at_ns, completed, &mut out),
            Observation::ContainerRemove { id } => self.container_remove(&id, &mut out),
            Observation::SandboxList {
                items,
                complete,
                listed_at_ns,
            } => self.sandbox_list(items, complete, listed_at_ns, &mut out),
            Observation::ContainerList {
                items,
                complete,
                listed_at_ns,
            } => self.container_list(items, complete, listed_at_ns, &mut out),
            Observation::SandboxStatus {
                status,
                host_network,
            } => self.sandbox_status(status, host_network, &mut out),
            Observation::ContainerStatus {
                status,
                sandbox_id,
                envs,
            } => self.container_status(status, sandbox_id, envs, &mut out),
            Observation::TaskExit {
                container_id,
                exit_code,
                exited_at_ns,
            } => self.task_exit(&container_id, exit_code, exited_at_ns, &mut out),
            Observation::Truncated {
                sandbox_ids,
                container_ids,
            } => self.truncated(&sandbox_ids, &container_ids, &mut out),
            Observation::TaskOom { container_id } => self.task_oom(&container_id, &mut out),
            Observation::ContainerDeleted { id } => self.deleted(&id, &mut out),
            Observation::Rebuilt {
                sandboxes,
                containers,
            } => {
                let sandbox_ids = sandboxes.iter().map(|s| s.id.clone()).collect();
                let container_ids = containers.iter().map(|c| c.id.clone()).collect();
                let listed = lists::Listed {
                    sandbox_ids,
                    container_ids,
                    at_ns: None,
                };
                self.rebuilt(sandboxes, containers, &listed, &mut out)
            }
            Observation::Relisted {
                sandboxes,
                containers,
                sandbox_ids,
                container_ids,
                listed_at_ns,
            } => {
                let listed = lists::Listed {
                    sandbox_ids,
                    container_ids,
                    at_ns: Some(listed_at_ns),
                };
                self.rebuilt(sandboxes, containers, &listed, &mut out)
            }
        }
        out
    }

    pub(crate) fn remember(&mut self, a: Abandoned) {
        if self.abandoned.len() >= ABANDONED_MEMORY {
            self.abandoned.pop_front();
        }
        self.abandoned.push_back(a);
    }

    /// Whether a newly seen sandbox is the result of an abandoned RunPodSandbox (forgets it).
    fn take_abandoned_sandbox(&mut self, s: &Sandbox) -> bool {
        self.take_abandoned(&Abandoned::Sandbox {
            name: s.name.clone(),
            namespace: s.namespace.clone(),
            uid: s.uid.clone(),
            attempt: s.attempt,
        })
    }

    /// Whether a newly seen container is the result of an abandoned CreateContainer.
    fn take_abandoned_container(&mut self, c: &Container) -> bool {
        self.take_abandoned(&Abandoned::Container {
            sandbox_id: c.sandbox_id.clone(),
            name: c.name.clone(),
            attempt: c.attempt,
        })
    }

    fn take_abandoned(&mut self, want: &Abandoned) -> bool {
        if self.abandoned.is_empty() {
            return false;
        }
        match self.abandoned.iter().position(|a| a == want) {
            Some(i) => {
                self.abandoned.remove(i);
                true
            }
            None => false,
        }
    }

    /// Inserts a sandbox not seen before, emitting CREATED (and UNDELIVERED when it is the result
    /// of an abandoned call).
    fn insert_new_sandbox(&mut self, mut s: Sandbox, out: &mut Vec<Change>) {
        let undelivered = s.run_delivery == Delivery::Undelivered as i32
            || (s.run_delivery == Delivery::Unknown as i32 && self.take_abandoned_sandbox(&s));
        if undelivered {
            s.run_delivery = Delivery::Undelivered as i32;
        }
        self.sandboxes.insert(s.id.clone(), &s);
        out.push(Change::Sandbox(
            SandboxEventKind::SandboxEventCreated,
            s.clone(),
        ));
        if undelivered {
            out.push(Change::Sandbox(
                SandboxEventKind::SandboxEventUndelivered,
                s,
            ));
        }
    }

    /// Inserts a container not seen before, emitting CREATED (and UNDELIVERED when due).
    fn insert_new_container(&mut self, mut c: Container, out: &mut Vec<Change>) {
        let undelivered = c.create_delivery == Delivery::Undelivered as i32
            || (c.create_delivery == Delivery::Unknown as i32 && self.take_abandoned_container(&c));
        if undelivered {
            c.create_delivery = Delivery::Undelivered as i32;
        }
        self.containers.insert(c.id.clone(), &c);
        out.push(Change::Container(
            ContainerEventKind::ContainerEventCreated,
            c.clone(),
        ));
        if undelivered {
            out.push(Change::Container(
                ContainerEventKind::ContainerEventUndelivered,
                c,
            ));
        }
    }
}
