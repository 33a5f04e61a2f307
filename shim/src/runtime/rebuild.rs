//! Rebuilding the index from the runtime: the runtime is the source of truth, so no state file
//! is needed to survive a shim restart.
//!
//! `ListPodSandbox` + `ListContainers`, then a plain `*Status` per object (pod IP, exit code),
//! and for a container whose pod's probes reference environment variables a verbose
//! `ContainerStatus` read for those variables only (`runtime/rebuild/reader.rs`). Every answer is
//! cut down on the wire to what the index keeps (`keep`), then decoded tolerantly
//! (`podward_api::tolerant`): a sandbox with an invalid UTF-8 annotation value is rebuilt with
//! that value repaired, and no object ever makes the whole rebuild fail. Runs at start and
//! after every reconnect to containerd (events may have been missed while it was down).

pub mod reader;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use podward_api::backoff::Backoff;
use podward_api::cri;
use podward_api::labels;
use podward_api::shim::v1::{Container, KeyValue, Sandbox};
use podward_api::tolerant::Repair;
use tokio::sync::watch;

pub use self::reader::KeptReader;
use crate::index::Observation;
use crate::keep;
use crate::metrics::Metrics;
use crate::publish::Publisher;

/// Status calls in flight at once during a rebuild or a relist.
const PARALLEL_STATUS: usize = 8;

/// Rebuild errors.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// containerd could not be dialled.
    #[error("connect to containerd: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// A List call failed.
    #[error("list: {0}")]
    Rpc(#[from] tonic::Status),
}

/// What a rebuild read: the index entries, and what had to be repaired to decode them.
#[derive(Debug, Default)]
pub struct RuntimeState {
    /// Every sandbox that could be read.
    pub sandboxes: Vec<Sandbox>,
    /// Every container that could be read.
    pub containers: Vec<Container>,
    /// Fields repaired or objects dropped while decoding containerd's answers
    /// (`podward_api::tolerant`): an invalid string costs that string, not the rebuild.
    pub repairs: Vec<Repair>,
}

/// Both Lists, cut down to what the index keeps.
pub(crate) struct Listed {
    /// Sandboxes listed.
    pub sandboxes: Vec<cri::PodSandbox>,
    /// Containers listed.
    pub containers: Vec<cri::Container>,
    /// IDs of the objects listed with a kept field past its bound.
    pub truncated: HashSet<String>,
    /// What had to be repaired.
    pub repairs: Vec<Repair>,
}

impl Listed {
    /// Lists sandboxes, then containers.
    pub(crate) async fn read(client: &mut KeptReader) -> Result<Self, RebuildError> {
        let sandboxes = client.list_pod_sandbox().await?;
        let containers = client.list_containers().await?;
        let mut repairs = sandboxes.repairs;
        repairs.extend(containers.repairs);
        let truncated = sandboxes
            .truncated_ids
            .into_iter()
            .chain(containers.truncated_ids)
            .collect();
        Ok(Self {
            sandboxes: sandboxes.message.items,
            containers: containers.message.containers,
            truncated,
            repairs,
        })
    }

    /// The environment variables each listed sandbox's probes reference, by sandbox ID (only
    /// sandboxes whose probes reference some).
    pub(crate) fn env_names(&self) -> HashMap<String, BTreeSet<String>> {
        self.sandboxes
            .iter()
            .filter_map(|s| {
                let names = keep::env_names(
                    s.annotations
                        .get(labels::PODWARD_PROBES)
                        .map(String::as_str),
                );
                (!names.is_empty()).then(|| (s.id.clone(), names))
            })
            .collect()
    }
}

/// Reads the whole runtime state into index entries.
pub async fn read_runtime(socket: &Path) -> Result<RuntimeState, RebuildError> {
    let channel = podward_api::socket::connect(socket.to_owned()).await?;
    let mut client = KeptReader::new(channel);
    let listed = Listed::read(&mut client).await?;
    let env_names = listed.env_names();
    let (sandboxes, containers, repairs) = read_entries(
        &client,
        listed.sandboxes,
        listed.containers,
        &listed.truncated,
        &env_names,
    )
    .await;
    let mut all_repairs = listed.repairs;
    all_repairs.extend(repairs);
    Ok(RuntimeState {
        sandboxes,
        containers,
        repairs: all_repairs,
    })
}

/// The listed objects read whole: a Status each (8 at a time), then the environment the
/// probes reference (one at a time: a verbose status carries the whole OCI spec), each marked
/// truncated when its List or its Status had a kept field past its bound.
pub(crate) async fn read_entries(
    client: &KeptReader,
    sandboxes: Vec<cri::PodSandbox>,
    containers: Vec<cri::Container>,
    truncated: &HashSet<String>,
    env_names: &HashMap<String, BTreeSet<String>>,
) -> (Vec<Sandbox>, Vec<Container>, Vec<Repair>) {
    let sandboxes: Vec<(Option<Sandbox>, Vec<Repair>)> = futures::stream::iter(sandboxes)
        .map(|p| sandbox_entry(client.clone(), p))
        .buffer_unordered(PARALLEL_STATUS)
        .collect()
        .await;
    let containers: Vec<(Option<Container>, Vec<Repair>)> = futures::stream::iter(containers)
        .map(|c| container_entry(client.clone(), c))
        .buffer_unordered(PARALLEL_STATUS)
        .collect()
        .await;
    let mut repairs = Vec::new();
    let mut sandbox_entries = Vec::new();
    for (s, r) in sandboxes {
        sandbox_entries.extend(s.map(|mut s| {
            s.truncated |= truncated.contains(&s.id);
            s
        }));
        repairs.extend(r);
    }
    let mut container_entries = Vec::new();
    let mut client = client.clone();
    for (c, r) in containers {
        repairs.extend(r);
        let Some(mut c) = c else { continue };
        c.truncated |= truncated.contains(&c.id);
        if let Some(names) = env_names.get(&c.sandbox_id) {
            match client.container_env(&c.id, names).await {
                Ok(Some((env, cut))) => {
                    c.envs = keep_env(env);
                    c.truncated |= cut;
                }
                Ok(None) => {}
                Err(s) => {
                    // containerd cannot send the spec of a container whose environment is
                    // past half its message limit (the verbose answer carries it twice): the
                    // variables the probes reference are missing from the entry.
                    tracing::warn!(id = c.id, error = %s, "verbose ContainerStatus failed; the container's environment is not indexed");
                    c.truncated = true;
                }
            }
        }
        container_entries.push(c);
    }
    (sandbox_entries, container_entries, repairs)
}

fn keep_env(env: Vec<(String, String)>) -> Vec<KeyValue> {
    env.into_iter()
        .filter(|(k, _)| !k.is_empty())
        .map(|(key, value)| KeyValue { key, value })
        .collect()
}

/// A listed sandbox read whole (its Status); None once it is gone.
pub(crate) async fn sandbox_entry(
    mut client: KeptReader,
    p: cri::PodSandbox,
) -> (Option<Sandbox>, Vec<Repair>) {
    let mut idx = crate::index::Index::new();
    let id = p.id.clone();
    idx.apply(Observation::SandboxList {
        items: vec![p],
        complete: false,
        listed_at_ns: 0,
    });
    let mut repairs = Vec::new();
    let mut truncated = false;
    match client.pod_sandbox_status(&id).await {
        Ok(r) => {
            repairs = r.repairs;
            truncated = !r.truncated_ids.is_empty();
            if let Some(status) = r.message.status {
                idx.apply(Observation::SandboxStatus {
                    status,
                    host_network: None,
                });
            }
        }
        // Removed between List and Status: it no longer exists.
        Err(s) if s.code() == tonic::Code::NotFound => return (None, repairs),
        Err(s) => tracing::warn!(id, error = %s, "PodSandboxStatus failed during rebuild"),
    }
    let entry = idx.sandbox(&id).map(|mut s| {
        s.truncated |= truncated;
        s
    });
    (entry, repairs)
}

/// A listed container read whole (its Status, without the environment); None once it is gone.
pub(crate) async fn container_entry(
    mut client: KeptReader,
    c: cri::Container,
) -> (Option<Container>, Vec<Repair>) {
    let mut idx = crate::index::Index::new();
    let id = c.id.clone();
    idx.apply(Observation::ContainerList {
        items: vec![c],
        complete: false,
        listed_at_ns: 0,
    });
    let mut repairs = Vec::new();
    let mut truncated = false;
    match client.container_status(&id).await {
        Ok(r) => {
            repairs = r.repairs;
            truncated = !r.truncated_ids.is_empty();
            if let Some(status) = r.message.status {
                idx.apply(Observation::ContainerStatus {
                    status,
                    sandbox_id: None,
                    envs: None,
                });
            }
        }
        Err(s) if s.code() == tonic::Code::NotFound => return (None, repairs),
        Err(s) => tracing::warn!(id, error = %s, "ContainerStatus failed during rebuild"),
    }
    // Entries built here never saw the CRI path: delivery stays UNKNOWN (the index keeps what
    // it already knew when merging).
    let entry = idx.container(&id).map(|mut c| {
        c.truncated |= truncated;
        c
    });
    (entry, repairs)
}

/// Rebuilds at start and after every reconnect, retrying failures with backoff, until
/// `shutdown`. After each successful rebuild, `rebuilt` holds the connection generation it was
/// read on (readiness: the index is only whole once the current connection's rebuild is done).
pub async fn run(
    socket: PathBuf,
    publisher: Publisher,
    metrics: Metrics,
    mut generations: watch::Receiver<u64>,
    rebuilt: watch::Sender<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // Wait for a (new) connection.
        tokio::select! {
            _ = shutdown.changed() => return,
            r = generations.wait_for(|g| *g > 0) => if r.is_err() { return },
        }
        let generation = *generations.borrow_and_update();
        let mut backoff = Backoff::reconnect();
        loop {
            let started = tokio::time::Instant::now();
            match read_runtime(&socket).await {
                Ok(state) => {
                    let (ns, nc) = (state.sandboxes.len(), state.containers.len());
                    for r in &state.repairs {
                        metrics.count_repair(r);
                        tracing::warn!(repair = %r, "containerd's answer had an invalid field");
                    }
                    metrics.count_truncated(&state.sandboxes, &state.containers);
                    publisher.apply(Observation::Rebuilt {
                        sandboxes: state.sandboxes,
                        containers: state.containers,
                    });
                    rebuilt.send_replace(generation);
                    tracing::info!(
                        sandboxes = ns,
                        containers = nc,
                        ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "index rebuilt from the runtime"
                    );
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "rebuild from the runtime failed; retrying");
                    let d = backoff.next_delay();
                    tokio::select! {
                        _ = shutdown.changed() => return,
                        _ = tokio::time::sleep(d) => {}
                    }
                }
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            r = generations.changed() => if r.is_err() { return },
        }
    }
}
