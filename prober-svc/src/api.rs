//! `podward.prober.v1.Prober`: `Status`, `Watch` (de-duplicated result changes and kills) and
//! `CleanupPods`.
//!
//! Watch subscribers share one bounded ring (`tokio::sync::broadcast`): publishing never waits
//! for a subscriber, and one that falls more than the ring's size behind gets a `resync` event
//! (call `Status` again) instead of a silent gap, as the shim's Watch does.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use podward_api::prober::v1 as api;
use podward_api::prober::v1::prober_server::Prober as ProberApi;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::{Request, Response, Status};

use crate::manager::Manager;

/// Events a Watch subscriber may fall behind before it is resynced.
pub const WATCH_QUEUE: usize = 4096;

/// The event fan-out behind `Watch`.
#[derive(Clone)]
pub struct Hub {
    tx: broadcast::Sender<api::ProbeEvent>,
    seq: Arc<Mutex<u64>>,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new(WATCH_QUEUE)
    }
}

impl Hub {
    /// A hub whose subscribers may lag `capacity` events.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self {
            tx,
            seq: Arc::new(Mutex::new(0)),
        }
    }

    /// Publishes `ev` with the next sequence number (never blocks; no subscriber is fine).
    pub fn publish(&self, mut ev: api::ProbeEvent) {
        // The lock keeps sequence numbers in send order across concurrent publishers.
        let mut seq = self.seq.lock();
        *seq += 1;
        ev.seq = *seq;
        let _ = self.tx.send(ev);
    }

    /// A new subscription, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<api::ProbeEvent> {
        self.tx.subscribe()
    }
}

/// The gRPC service.
pub struct ProberService {
    manager: Manager,
    hub: Hub,
}

impl ProberService {
    /// Serves `manager`'s state and `hub`'s events.
    pub fn new(manager: Manager, hub: Hub) -> Self {
        Self { manager, hub }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<api::ProbeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl ProberApi for ProberService {
    async fn status(
        &self,
        request: Request<api::StatusRequest>,
    ) -> Result<Response<api::StatusResponse>, Status> {
        let uid = request.into_inner().pod_uid;
        let uid = (!uid.is_empty()).then_some(uid);
        Ok(Response::new(self.manager.status(uid.as_deref())))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        request: Request<api::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let uid = request.into_inner().pod_uid;
        let stream = BroadcastStream::new(self.hub.subscribe()).filter_map(move |item| {
            let out = match item {
                Ok(ev) if uid.is_empty() || ev.pod_uid == uid => Some(Ok(ev)),
                Ok(_) => None,
                Err(BroadcastStreamRecvError::Lagged(_)) => Some(Ok(api::ProbeEvent {
                    event: Some(api::probe_event::Event::Resync(true)),
                    ..Default::default()
                })),
            };
            std::future::ready(out)
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn cleanup_pods(
        &self,
        request: Request<api::CleanupPodsRequest>,
    ) -> Result<Response<api::CleanupPodsResponse>, Status> {
        let gone = request.into_inner().gone_pod_uids;
        let removed = self.manager.cleanup(&gone);
        if !removed.is_empty() {
            tracing::info!(pods = ?removed, "stopped the workers of pods that are gone");
        }
        Ok(Response::new(api::CleanupPodsResponse {
            removed_pod_uids: removed,
        }))
    }
}
