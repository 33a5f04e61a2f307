//! The index's own state: sandboxes and containers by ID, when each was last known to exist,
//! the abandoned calls it remembers, and the partial views a scan over every entry decodes; what
//! every kind of observation is folded into.

use std::collections::{HashMap, VecDeque};

use podward_api::shim::v1::{
    Container, ContainerEventKind, Delivery, Sandbox, SandboxEventKind, Snapshot,
};

use super::observation::Change;
use super::packed::Table;

/// How many abandoned calls (caller gone before containerd answered) are remembered, to recognise
/// their result when it shows up in a later List or event.
const ABANDONED_MEMORY: usize = 256;

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
pub(super) struct ContainerScan {
    #[prost(string, tag = "2")]
    pub(super) sandbox_id: String,
    #[prost(int32, tag = "6")]
    pub(super) state: i32,
    #[prost(int64, tag = "11")]
    pub(super) created_at_ns: i64,
    #[prost(int64, tag = "13")]
    pub(super) finished_at_ns: i64,
}

/// The fields of a [`Sandbox`] that scans over every sandbox (and a relist's check of each
/// listed one) read. Tags as in `podward.shim.v1.Sandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SandboxScan {
    #[prost(int32, tag = "6")]
    pub(super) state: i32,
    #[prost(int64, tag = "12")]
    pub(super) created_at_ns: i64,
}

/// Sandboxes and containers by ID, each kept in its protobuf encoding (`index/packed.rs` says
/// why).
#[derive(Debug, Default)]
pub struct Index {
    pub(super) sandboxes: Table<Sandbox>,
    pub(super) containers: Table<Container>,
    pub(crate) abandoned: VecDeque<Abandoned>,
    /// Per entry ID, the latest time it is known to have existed in containerd (its creating
    /// call completed, a List holding it was sent): a List sent before that never removes it.
    pub(super) existed_at: HashMap<String, i64>,
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

    /// Remembers an abandoned call, forgetting the oldest past [`ABANDONED_MEMORY`].
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
    pub(super) fn insert_new_sandbox(&mut self, mut s: Sandbox, out: &mut Vec<Change>) {
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
    pub(super) fn insert_new_container(&mut self, mut c: Container, out: &mut Vec<Change>) {
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
