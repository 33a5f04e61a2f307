//! Rebuilding the index from the runtime: the runtime is the source of truth, so no state file
//! is needed to survive a shim restart.
//!
//! `ListPodSandbox` + `ListContainers`, then a verbose `*Status` per object (pod IP, exit code,
//! and the OCI runtime spec, parsed with `oci-spec`, for the environment). Runs at start and
//! after every reconnect to containerd (events may have been missed while it was down).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use podward_api::backoff::Backoff;
use podward_api::cri;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::limits::CRI_MESSAGE_BYTES;
use podward_api::shim::v1::{Container, KeyValue, Sandbox};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::index::Observation;
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

/// Reads the whole runtime state into index entries.
pub async fn read_runtime(socket: &Path) -> Result<(Vec<Sandbox>, Vec<Container>), RebuildError> {
    let channel = podward_api::socket::connect(socket.to_owned()).await?;
    let client = RuntimeServiceClient::new(channel)
        .max_decoding_message_size(CRI_MESSAGE_BYTES)
        .max_encoding_message_size(CRI_MESSAGE_BYTES);
    let sandboxes = client
        .clone()
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await?
        .into_inner()
        .items;
    let containers = client
        .clone()
        .list_containers(cri::ListContainersRequest::default())
        .await?
        .into_inner()
        .containers;

    let sandboxes: Vec<Sandbox> = futures::stream::iter(sandboxes)
        .map(|p| sandbox_entry(client.clone(), p))
        .buffer_unordered(PARALLEL_STATUS)
        .filter_map(|s| async move { s })
        .collect()
        .await;
    let containers: Vec<Container> = futures::stream::iter(containers)
        .map(|c| container_entry(client.clone(), c))
        .buffer_unordered(PARALLEL_STATUS)
        .filter_map(|c| async move { c })
        .collect()
        .await;
    Ok((sandboxes, containers))
}

async fn sandbox_entry(
    mut client: RuntimeServiceClient<Channel>,
    p: cri::PodSandbox,
) -> Option<Sandbox> {
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
    match client.pod_sandbox_status(req).await {
        Ok(r) => {
            if let Some(status) = r.into_inner().status {
                idx.apply(Observation::SandboxStatus {
                    status,
                    host_network: None,
                });
            }
        }
        // Removed between List and Status: it no longer exists.
        Err(s) if s.code() == tonic::Code::NotFound => return None,
        Err(s) => tracing::warn!(id, error = %s, "PodSandboxStatus failed during rebuild"),
    }
    idx.sandbox(&id).cloned()
}

async fn container_entry(
    mut client: RuntimeServiceClient<Channel>,
    c: cri::Container,
) -> Option<Container> {
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
    match answer {
        Ok(r) => {
            let r = r.into_inner();
            let envs = env_from_info(&r.info);
            if let Some(status) = r.status {
                idx.apply(Observation::ContainerStatus {
                    status,
                    sandbox_id: None,
                    envs,
                });
            }
        }
        Err(s) if s.code() == tonic::Code::NotFound => return None,
        Err(s) => tracing::warn!(id, error = %s, "ContainerStatus failed during rebuild"),
    }
    let mut out = idx.container(&id).cloned()?;
    // Entries built here never saw the CRI path: delivery stays UNKNOWN (the index keeps what
    // it already knew when merging).
    out.envs.retain(|kv: &KeyValue| !kv.key.is_empty());
    Some(out)
}

/// Rebuilds at start and after every reconnect, retrying failures with backoff, until
/// `shutdown`. `rebuilt` is bumped after each successful rebuild (readiness, tests).
pub async fn run(
    socket: PathBuf,
    publisher: Publisher,
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
        generations.mark_unchanged();
        let mut backoff = Backoff::reconnect();
        loop {
            let started = tokio::time::Instant::now();
            match read_runtime(&socket).await {
                Ok((sandboxes, containers)) => {
                    let (ns, nc) = (sandboxes.len(), containers.len());
                    publisher.apply(Observation::Rebuilt {
                        sandboxes,
                        containers,
                    });
                    rebuilt.send_modify(|n| *n += 1);
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
