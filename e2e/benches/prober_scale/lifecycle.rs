//! An in-process fake of the shim's Lifecycle API (tonic, on a unix socket) that serves one
//! synthetic snapshot: `n` pods of one container each, every container with the probes asked for.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;

use podward_api::shim::v1 as shim;
use podward_api::shim::v1::lifecycle_server::{Lifecycle, LifecycleServer};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::servers::Target;

/// Which probes every container gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mix {
    /// liveness (TCP) + readiness (HTTP) + startup (HTTP): startup stops once it succeeds.
    StartupLivenessReadiness,
    /// liveness (TCP) + readiness (HTTP): every worker probes every period.
    LivenessReadiness,
}

/// Builds the snapshot.
pub(crate) fn snapshot(
    n: usize,
    period_s: u32,
    mix: Mix,
    targets: &[Target],
    started_at_ns: i64,
) -> shim::Snapshot {
    let mut snap = shim::Snapshot {
        seq: 1,
        instance_id: "bench".into(),
        runtime_connected: true,
        ..Default::default()
    };
    for i in 0..n {
        // Pod IP = the target's address; the probes name only ports.
        let (h, t) = super::servers::pair(targets, i);
        let uid = format!("uid-{i}");
        let live = format!(
            r#""livenessProbe":{{"tcpSocket":{{"port":{}}},"periodSeconds":{period_s},"timeoutSeconds":1,"failureThreshold":3}}"#,
            t.addr.port()
        );
        let ready = format!(
            r#""readinessProbe":{{"httpGet":{{"path":"/healthz","port":{}}},"periodSeconds":{period_s},"timeoutSeconds":1,"failureThreshold":3}}"#,
            h.addr.port()
        );
        let startup = format!(
            r#","startupProbe":{{"httpGet":{{"path":"/started","port":{}}},"periodSeconds":{period_s},"timeoutSeconds":1,"failureThreshold":30}}"#,
            h.addr.port()
        );
        let probes = format!(
            r#"{{"app":{{{live},{ready}{}}}}}"#,
            if mix == Mix::StartupLivenessReadiness {
                startup.as_str()
            } else {
                ""
            }
        );
        let mut annotations = HashMap::new();
        annotations.insert(podward_api::labels::PODWARD_PROBES.to_owned(), probes);
        snap.sandboxes.push(shim::Sandbox {
            id: format!("sb-{i}"),
            name: format!("pod-{i}"),
            namespace: "bench".into(),
            uid: uid.clone(),
            state: shim::SandboxState::Ready as i32,
            annotations,
            pod_ip: h.addr.ip().to_string(),
            created_at_ns: started_at_ns,
            ..Default::default()
        });
        snap.containers.push(shim::Container {
            id: format!("ctr-{i}"),
            sandbox_id: format!("sb-{i}"),
            pod_uid: uid,
            name: "app".into(),
            state: shim::ContainerState::Running as i32,
            created_at_ns: started_at_ns,
            started_at_ns,
            ..Default::default()
        });
    }
    snap
}

struct Fake {
    snapshot: shim::Snapshot,
}

type Events = Pin<Box<dyn Stream<Item = Result<shim::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Lifecycle for Fake {
    async fn snapshot(
        &self,
        _: Request<shim::SnapshotRequest>,
    ) -> Result<Response<shim::Snapshot>, Status> {
        Ok(Response::new(self.snapshot.clone()))
    }

    type WatchStream = Events;

    async fn watch(&self, _: Request<shim::WatchRequest>) -> Result<Response<Events>, Status> {
        let first = shim::WatchEvent {
            seq: 1,
            observed_at_ns: podward_api::time::now_ns(),
            event: Some(shim::watch_event::Event::Snapshot(self.snapshot.clone())),
        };
        // The snapshot, then nothing: the node is steady during the measurement.
        let s = tokio_stream::StreamExt::chain(
            tokio_stream::iter([Ok(first)]),
            tokio_stream::pending(),
        );
        Ok(Response::new(Box::pin(s)))
    }
}

/// Serves `snapshot` on `path` until the runtime ends.
pub(crate) async fn serve(
    path: &Path,
    snapshot: shim::Snapshot,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener =
        podward_api::socket::serve_unix(path, podward_api::socket::SocketPerms::default()).await?;
    let svc = LifecycleServer::new(Fake { snapshot })
        .max_encoding_message_size(podward_api::limits::API_MESSAGE_BYTES);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    Ok(())
}
