//! Rebuilding the index from the runtime: the runtime is the source of truth, so no state file
//! is needed to survive a shim restart.
//!
//! `ListPodSandbox` + `ListContainers`, then a verbose `*Status` per object (pod IP, exit code,
//! and the OCI runtime spec, parsed with `oci-spec`, for the environment). Answers are decoded
//! tolerantly (`podward_api::tolerant`): a sandbox with an invalid UTF-8 annotation value is
//! rebuilt with that value repaired, and no object ever makes the whole rebuild fail. Runs at start and
//! after every reconnect to containerd (events may have been missed while it was down).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use podward_api::backoff::Backoff;
use podward_api::cri;
use podward_api::shim::v1::{Container, KeyValue, Sandbox};
use podward_api::tolerant::Repair;
use podward_api::tolerant::runtime::RuntimeReader;
use tokio::sync::watch;

use crate::index::Observation;
use crate::metrics::Metrics;
use crate::publish::Publisher;

/// Status calls in flight at once during a rebuild.
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

/// The environment in an OCI runtime spec (`info.runtimeSpec.process.env` of a verbose
/// ContainerStatus), in order. Pairs without `=` keep an empty value.
pub fn env_from_info(info: &HashMap<String, String>) -> Option<Vec<(String, String)>> {
    let json = info.get("info")?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let spec_json = v.get("runtimeSpec")?;
    let spec: oci_spec::runtime::Spec = serde_json::from_value(spec_json.clone()).ok()?;
    let env = spec.process().as_ref()?.env().clone().unwrap_or_default();
    Some(
        env.into_iter()
            .map(|e| match e.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (e, String::new()),
            })
            .collect(),
    )
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

/// Reads the whole runtime state into index entries.
pub async fn read_runtime(socket: &Path) -> Result<RuntimeState, RebuildError> {
    let channel = podward_api::socket::connect(socket.to_owned()).await?;
    let mut client = RuntimeReader::new(channel);
    let mut repairs = Vec::new();
    let sandboxes = client
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await?;
    repairs.extend(sandboxes.repairs);
    let containers = client
        .list_containers(cri::ListContainersRequest::default())
        .await?;
    repairs.extend(containers.repairs);

    let sandboxes: Vec<(Option<Sandbox>, Vec<Repair>)> =
        futures::stream::iter(sandboxes.message.items)
            .map(|p| sandbox_entry(client.clone(), p))
            .buffer_unordered(PARALLEL_STATUS)
            .collect()
            .await;
    let containers: Vec<(Option<Container>, Vec<Repair>)> =
        futures::stream::iter(containers.message.containers)
            .map(|c| container_entry(client.clone(), c))
            .buffer_unordered(PARALLEL_STATUS)
            .collect()
            .await;
    let mut state = RuntimeState::default();
    for (s, r) in sandboxes {
        state.sandboxes.extend(s);
        repairs.extend(r);
    }
    for (c, r) in containers {
        state.containers.extend(c);
        repairs.extend(r);
    }
    state.repairs = repairs;
    Ok(state)
}

/// A listed sandbox read whole (its Status); None once it is gone.
pub(crate) async fn sandbox_entry(
    mut client: RuntimeReader,
    p: cri::PodSandbox,
) -> (Option<Sandbox>, Vec<Repair>) {
    let mut idx = crate::index::Index::new();
    let id = p.id.clone();
    idx.apply(Observation::SandboxList {
        items: vec![p],
        complete: false,
    });
    let req = cri::PodSandboxStatusRequest {
        pod_sandbox_id: id.clone(),
        verbose: false,
    };
    let mut repairs = Vec::new();
    match client.pod_sandbox_status(req).await {
        Ok(r) => {
            repairs = r.repairs;
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
    (idx.sandbox(&id), repairs)
}

/// A listed container read whole (its verbose Status); None once it is gone.
pub(crate) async fn container_entry(
    mut client: RuntimeReader,
    c: cri::Container,
) -> (Option<Container>, Vec<Repair>) {
    let mut idx = crate::index::Index::new();
    let id = c.id.clone();
    idx.apply(Observation::ContainerList {
        items: vec![c],
        complete: false,
    });
    let req = |verbose| cri::ContainerStatusRequest {
        container_id: id.clone(),
        verbose,
    };
    let mut answer = client.container_status(req(true)).await;
    if matches!(&answer, Err(s) if s.code() != tonic::Code::NotFound) {
        // The verbose part can fail on its own (e.g. for a container whose task is gone);
        // the plain status still has the state and the exit code.
        answer = client.container_status(req(false)).await;
    }
    let mut repairs = Vec::new();
    match answer {
        Ok(r) => {
            repairs = r.repairs;
            let r = r.message;
            let envs = env_from_info(&r.info);
            if let Some(status) = r.status {
                idx.apply(Observation::ContainerStatus {
                    status,
                    sandbox_id: None,
                    envs,
                });
            }
        }
        Err(s) if s.code() == tonic::Code::NotFound => return (None, repairs),
        Err(s) => tracing::warn!(id, error = %s, "ContainerStatus failed during rebuild"),
    }
    let Some(mut out) = idx.container(&id) else {
        return (None, repairs);
    };
    // Entries built here never saw the CRI path: delivery stays UNKNOWN (the index keeps what
    // it already knew when merging).
    out.envs.retain(|kv: &KeyValue| !kv.key.is_empty());
    (Some(out), repairs)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_comes_from_the_runtime_spec_in_order() {
        let info = serde_json::json!({
            "sandboxID": "s1",
            "runtimeSpec": {
                "ociVersion": "1.0.2",
                "process": {"cwd": "/", "env": ["PATH=/bin", "A=1=2", "EMPTY="], "user": {"uid": 0, "gid": 0}},
                "root": {"path": "rootfs"}
            }
        });
        let mut m = HashMap::new();
        m.insert("info".to_owned(), info.to_string());
        let env = env_from_info(&m).expect("env");
        assert_eq!(
            env,
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("A".to_owned(), "1=2".to_owned()),
                ("EMPTY".to_owned(), String::new()),
            ]
        );
        m.insert("info".to_owned(), "{not json".to_owned());
        assert!(env_from_info(&m).is_none());
    }
}
