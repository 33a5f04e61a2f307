//! The fallback source: while the shim is down, read the node straight from containerd's CRI
//! (`ListPodSandbox`/`ListContainers`, plus `PodSandboxStatus` for the IP and verbose
//! `ContainerStatus` for start time and env), as kubelet's PLEG relist would.
//!
//! Status answers are cached per ID (a sandbox's IP and a started container's env never change),
//! so a steady node costs two List calls per poll. Answers are decoded tolerantly
//! (`podward_api::tolerant`): an invalid UTF-8 string costs that string (an object that cannot
//! be decoded at all, that object), never the poll; each repaired object is logged once.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use podward_api::cri::{
    Container, ContainerStatusRequest, ListContainersRequest, ListPodSandboxRequest, NamespaceMode,
    PodSandbox, PodSandboxStatusRequest,
};
use podward_api::labels;
use podward_api::tolerant::Decoded;
use podward_api::tolerant::runtime::RuntimeReader;

use super::convert::{cri_state, env_from_verbose_info, pod_grace, ports, probe_ip};
use super::index::{NodeIndex, SandboxRec};
use crate::model::{ContainerInfo, PodInfo, RunState};

/// A container's start time and environment, once known.
type ContainerExtra = (i64, Arc<[(String, String)]>);

/// Cached per-object status.
#[derive(Default)]
pub struct CriPoller {
    sandboxes: HashMap<String, (Option<IpAddr>, bool)>,
    containers: HashMap<String, ContainerExtra>,
    /// Objects whose repair was already logged (one WARN per object, not per poll).
    repaired: HashSet<String>,
}

impl CriPoller {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the whole node; an error means "no answer" (the caller keeps its last view).
    pub async fn poll(
        &mut self,
        client: &mut RuntimeReader,
        node_ip: IpAddr,
    ) -> Result<Vec<PodInfo>, tonic::Status> {
        let sandboxes = client
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await?;
        let sandboxes = self.note(sandboxes).items;
        let containers = client
            .list_containers(ListContainersRequest { filter: None })
            .await?;
        let containers = self.note(containers).containers;
        let mut index = NodeIndex::new();
        for s in &sandboxes {
            let ip = self.sandbox_ip(client, &s.id, node_ip).await?;
            index.put_sandbox(sandbox_rec(s, ip));
        }
        for c in &containers {
            let state = cri_state(c.state);
            let (started_at, env) = self.container_extra(client, &c.id, state).await?;
            let meta = c.metadata.clone().unwrap_or_default();
            let uid = c.labels.get(labels::POD_UID).cloned().unwrap_or_default();
            index.put_container(
                &uid,
                ContainerInfo {
                    id: c.id.as_str().into(),
                    name: meta.name,
                    attempt: meta.attempt,
                    state,
                    created_at_ns: c.created_at,
                    started_at_ns: started_at,
                    ports: ports(&c.annotations),
                    env,
                    pod_grace_seconds: pod_grace(&c.annotations),
                    stop_requested_at_ns: 0,
                },
            );
        }
        self.forget_gone(&sandboxes, &containers);
        Ok(index.pods())
    }

    /// The address to probe sandbox `id` at: cached, else from its `PodSandboxStatus` (the pod
    /// IP, or `node_ip` for a host-network sandbox).
    async fn sandbox_ip(
        &mut self,
        client: &mut RuntimeReader,
        id: &str,
        node_ip: IpAddr,
    ) -> Result<Option<IpAddr>, tonic::Status> {
        if let Some((ip, _)) = self.sandboxes.get(id) {
            return Ok(*ip);
        }
        let st = client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.to_owned(),
                verbose: false,
            })
            .await?;
        let st = self.note(st).status.unwrap_or_default();
        let host_network = st
            .linux
            .and_then(|l| l.namespaces)
            .and_then(|n| n.options)
            .is_some_and(|o| o.network == NamespaceMode::Node as i32);
        let pod_ip = st.network.map(|n| n.ip).unwrap_or_default();
        let ip = probe_ip(&pod_ip, host_network, node_ip);
        self.sandboxes.insert(id.to_owned(), (ip, host_network));
        Ok(ip)
    }

    /// Container `id`'s start time and environment: cached once it started (or while it is not
    /// running), else from its verbose `ContainerStatus`.
    async fn container_extra(
        &mut self,
        client: &mut RuntimeReader,
        id: &str,
        state: RunState,
    ) -> Result<ContainerExtra, tonic::Status> {
        if let Some((started, env)) = self.containers.get(id)
            && (*started > 0 || state != RunState::Running)
        {
            return Ok((*started, env.clone()));
        }
        let resp = client
            .container_status(ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: true,
            })
            .await?;
        let resp = self.note(resp);
        let started = resp.status.map(|s| s.started_at).unwrap_or_default();
        let env: Arc<[(String, String)]> = env_from_verbose_info(&resp.info).into();
        self.containers
            .insert(id.to_owned(), (started, env.clone()));
        Ok((started, env))
    }

    /// Forgets the cache of objects that are gone, so it stays as large as the node.
    fn forget_gone(&mut self, sandboxes: &[PodSandbox], containers: &[Container]) {
        self.sandboxes
            .retain(|id, _| sandboxes.iter().any(|s| &s.id == id));
        let live: HashSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        self.containers.retain(|id, _| live.contains(id.as_str()));
        self.repaired
            .retain(|id| live.contains(id.as_str()) || sandboxes.iter().any(|s| &s.id == id));
    }

    /// The message of an answer; what had to be repaired in it is logged once per object.
    fn note<M>(&mut self, d: Decoded<M>) -> M {
        for r in &d.repairs {
            let id = r.object_id.clone().unwrap_or_default();
            if self.repaired.insert(id) {
                tracing::warn!(repair = %r, "containerd's answer had an invalid field");
            }
        }
        d.message
    }
}

/// The index's record of sandbox `s`, probed at `ip`.
fn sandbox_rec(s: &PodSandbox, ip: Option<IpAddr>) -> SandboxRec {
    let meta = s.metadata.clone().unwrap_or_default();
    SandboxRec {
        id: s.id.clone(),
        uid: meta.uid,
        name: meta.name,
        namespace: meta.namespace,
        created_at_ns: s.created_at,
        ip,
        probes: s.annotations.get(labels::PODWARD_PROBES).cloned(),
        stop_requested_at_ns: 0,
    }
}
