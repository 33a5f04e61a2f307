//! The source's copy of the node: sandboxes and containers by ID, indexed by pod UID, so an event
//! about one object rebuilds only its pod's view.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::{ContainerInfo, PodInfo};

/// One sandbox, reduced to what the prober uses.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxRec {
    /// Sandbox ID.
    pub id: String,
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Creation time, Unix ns.
    pub created_at_ns: i64,
    /// Probe address (pod IP, or node IP for host network).
    pub ip: Option<IpAddr>,
    /// The `podward.io/probes` annotation.
    pub probes: Option<String>,
    /// When kubelet asked to stop it (0 = never).
    pub stop_requested_at_ns: i64,
}

/// Sandboxes and containers by ID with a per-UID index.
#[derive(Debug, Default)]
pub struct NodeIndex {
    sandboxes: HashMap<String, SandboxRec>,
    containers: HashMap<String, (String, Arc<ContainerInfo>)>,
    by_uid: HashMap<String, (HashSet<String>, HashSet<String>)>,
}

impl NodeIndex {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a sandbox.
    pub fn put_sandbox(&mut self, s: SandboxRec) {
        self.by_uid
            .entry(s.uid.clone())
            .or_default()
            .0
            .insert(s.id.clone());
        self.sandboxes.insert(s.id.clone(), s);
    }

    /// Removes a sandbox; returns its pod UID.
    pub fn remove_sandbox(&mut self, id: &str) -> Option<String> {
        let s = self.sandboxes.remove(id)?;
        if let Some(e) = self.by_uid.get_mut(&s.uid) {
            e.0.remove(id);
        }
        Some(s.uid)
    }

    /// Adds or replaces a container of pod `uid`.
    pub fn put_container(&mut self, uid: &str, c: ContainerInfo) {
        let id = c.id.to_string();
        if let Some((old_uid, _)) = self.containers.get(&id)
            && old_uid != uid
            && let Some(e) = self.by_uid.get_mut(old_uid)
        {
            e.1.remove(&id);
        }
        self.by_uid
            .entry(uid.to_owned())
            .or_default()
            .1
            .insert(id.clone());
        self.containers.insert(id, (uid.to_owned(), Arc::new(c)));
    }

    /// Removes a container; returns its pod UID.
    pub fn remove_container(&mut self, id: &str) -> Option<String> {
        let (uid, _) = self.containers.remove(id)?;
        if let Some(e) = self.by_uid.get_mut(&uid) {
            e.1.remove(id);
        }
        Some(uid)
    }

    /// The pod view of `uid` (None when no sandbox of it exists).
    pub fn pod(&self, uid: &str) -> Option<PodInfo> {
        let (sandboxes, containers) = self.by_uid.get(uid)?;
        let newest = sandboxes
            .iter()
            .filter_map(|id| self.sandboxes.get(id))
            .max_by_key(|s| (s.created_at_ns, s.id.clone()))?;
        let containers: BTreeMap<String, Arc<ContainerInfo>> = containers
            .iter()
            .filter_map(|id| self.containers.get(id))
            .map(|(_, c)| (c.id.to_string(), c.clone()))
            .collect();
        Some(PodInfo {
            uid: uid.to_owned(),
            name: newest.name.clone(),
            namespace: newest.namespace.clone(),
            sandbox_id: newest.id.clone(),
            sandbox_created_at_ns: newest.created_at_ns,
            ip: newest.ip,
            probes_annotation: newest.probes.clone(),
            stop_requested_at_ns: newest.stop_requested_at_ns,
            containers,
            api: None,
        })
    }

    /// Every pod.
    pub fn pods(&self) -> Vec<PodInfo> {
        self.by_uid.keys().filter_map(|u| self.pod(u)).collect()
    }

    /// UIDs of pods that have a sandbox.
    pub fn uids(&self) -> Vec<String> {
        self.by_uid
            .iter()
            .filter(|(_, (s, _))| !s.is_empty())
            .map(|(u, _)| u.clone())
            .collect()
    }

    /// Drops UIDs with nothing left.
    pub fn compact(&mut self) {
        self.by_uid
            .retain(|_, (s, c)| !s.is_empty() || !c.is_empty());
    }
}
