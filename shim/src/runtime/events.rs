//! containerd's own event stream (task exit, OOM, container delete) into the index.
//!
//! kubelet learns of an exit only on its next relist; containerd publishes it the moment the
//! task's shim reaps the process, so this is what makes exits visible within milliseconds.

use std::path::{Path, PathBuf};

use podward_api::backoff::Backoff;
use podward_api::containerd::events::{ContainerDelete, TaskExit, TaskOom};
use podward_api::containerd::services::v1::SubscribeRequest;
use podward_api::containerd::services::v1::events_client::EventsClient;
use podward_api::containerd::types::Envelope;
use prost::Message;
use tokio::sync::watch;

use crate::index::Observation;
use crate::publish::Publisher;

/// Topics we subscribe to.
const TOPICS: [&str; 3] = ["/tasks/exit", "/tasks/oom", "/containers/delete"];

/// The subscription filters for `namespace` (containerd's filter syntax; filters are OR'ed,
/// comma-separated terms inside one are AND'ed).
pub fn filters(namespace: &str) -> Vec<String> {
    TOPICS
        .iter()
        .map(|t| format!("namespace=={ns:?},topic=={t:?}", ns = namespace))
        .collect()
}

/// Decodes one envelope into an observation (None for other topics or undecodable payloads).
pub fn decode(env: &Envelope, namespace: &str) -> Option<Observation> {
    if env.namespace != namespace {
        return None;
    }
    let any = env.event.as_ref()?;
    let kind = any.type_url.rsplit('/').next().unwrap_or(&any.type_url);
    match kind {
        "containerd.events.TaskExit" => {
            let e = TaskExit::decode(any.value.as_slice()).ok()?;
            // Exits of exec'd processes (ExecSync probes) carry the exec ID; only the init
            // process ending ends the container.
            if !e.id.is_empty() && e.id != e.container_id {
                return None;
            }
            let exited_at_ns = e
                .exited_at
                .map(|t| {
                    t.seconds
                        .saturating_mul(1_000_000_000)
                        .saturating_add(i64::from(t.nanos))
                })
                .unwrap_or(0);
            Some(Observation::TaskExit {
                container_id: e.container_id,
                exit_code: i32::try_from(e.exit_status).unwrap_or(i32::MAX),
                exited_at_ns,
            })
        }
        "containerd.events.TaskOOM" | "containerd.events.TaskOom" => {
            let e = TaskOom::decode(any.value.as_slice()).ok()?;
            Some(Observation::TaskOom {
                container_id: e.container_id,
            })
        }
        "containerd.events.ContainerDelete" => {
            let e = ContainerDelete::decode(any.value.as_slice()).ok()?;
            Some(Observation::ContainerDeleted { id: e.id })
        }
        _ => None,
    }
}

/// Subscribes (again after every failure, with backoff) until `shutdown` fires. `connected`
/// fires on each new upstream connection: a broken subscription is retried right away then.
pub async fn run(
    socket: PathBuf,
    namespace: String,
    publisher: Publisher,
    mut generations: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::reconnect();
    let filters = filters(&namespace);
    loop {
        let session = subscribe_once(&socket, &namespace, &filters, &publisher, &mut backoff);
        tokio::select! {
            _ = shutdown.changed() => return,
            r = session => if let Err(e) = r {
                tracing::debug!(error = %e, "containerd event stream unavailable");
            },
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(delay) => {}
            _ = generations.changed() => {}
        }
    }
}

/// Event stream errors.
#[derive(Debug, thiserror::Error)]
enum EventsError {
    #[error("connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("subscribe: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("stream ended")]
    Ended,
}

async fn subscribe_once(
    socket: &Path,
    namespace: &str,
    filters: &[String],
    publisher: &Publisher,
    backoff: &mut Backoff,
) -> Result<(), EventsError> {
    let channel = podward_api::socket::connect(socket.to_owned()).await?;
    let mut client = EventsClient::new(channel);
    let mut stream = client
        .subscribe(SubscribeRequest {
            filters: filters.to_vec(),
        })
        .await?
        .into_inner();
    tracing::info!("subscribed to containerd events");
    backoff.reset();
    while let Some(env) = stream.message().await? {
        if let Some(obs) = decode(&env, namespace) {
            publisher.apply(obs);
        }
    }
    Err(EventsError::Ended)
}

#[cfg(test)]
mod tests {
    use podward_api::containerd::events::TaskExit;
    use prost_types::{Any, Timestamp};

    use super::*;

    fn envelope(ns: &str, type_url: &str, value: Vec<u8>) -> Envelope {
        Envelope {
            timestamp: None,
            namespace: ns.to_owned(),
            topic: "/tasks/exit".to_owned(),
            event: Some(Any {
                type_url: type_url.to_owned(),
                value,
            }),
        }
    }

    #[test]
    fn task_exit_of_init_process_decodes_with_time() {
        let e = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            pid: 10,
            exit_status: 3,
            exited_at: Some(Timestamp {
                seconds: 5,
                nanos: 7,
            }),
        };
        let env = envelope("k8s.io", "containerd.events.TaskExit", e.encode_to_vec());
        match decode(&env, "k8s.io") {
            Some(Observation::TaskExit {
                container_id,
                exit_code,
                exited_at_ns,
            }) => {
                assert_eq!(container_id, "c1");
                assert_eq!(exit_code, 3);
                assert_eq!(exited_at_ns, 5_000_000_007);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            decode(&env, "default").is_none(),
            "other namespaces are ignored"
        );
    }

    #[test]
    fn exec_exits_and_garbage_are_ignored() {
        let e = TaskExit {
            container_id: "c1".into(),
            id: "exec-1".into(),
            ..TaskExit::default()
        };
        let env = envelope("k8s.io", "containerd.events.TaskExit", e.encode_to_vec());
        assert!(decode(&env, "k8s.io").is_none());
        let env = envelope(
            "k8s.io",
            "containerd.events.TaskExit",
            vec![0xff, 0xff, 0xff],
        );
        assert!(decode(&env, "k8s.io").is_none());
    }

    #[test]
    fn filters_quote_values() {
        assert_eq!(
            filters("k8s.io")[0],
            "namespace==\"k8s.io\",topic==\"/tasks/exit\""
        );
    }
}
