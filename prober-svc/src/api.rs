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

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn ev(uid: &str) -> api::ProbeEvent {
        api::ProbeEvent {
            pod_uid: uid.to_owned(),
            event: Some(api::probe_event::Event::Result(
                api::ProbeResult::Success as i32,
            )),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_lagging_subscriber_gets_resync_instead_of_a_gap_and_memory_stays_bounded() {
        let hub = Hub::new(4);
        let mut slow = BroadcastStream::new(hub.subscribe());
        for _ in 0..10 {
            hub.publish(ev("u"));
        }
        let first = slow.next().await.expect("item");
        assert!(
            matches!(first, Err(BroadcastStreamRecvError::Lagged(6))),
            "{first:?}"
        );
        // The 4 newest remain, in order, with consecutive sequence numbers.
        let mut rest = Vec::new();
        for _ in 0..4 {
            rest.push(slow.next().await.expect("item").expect("event").seq);
        }
        assert_eq!(rest, vec![7, 8, 9, 10]);
    }

    #[tokio::test]
    async fn publishing_without_subscribers_never_blocks_or_fails() {
        let hub = Hub::new(1);
        for _ in 0..1000 {
            hub.publish(ev("u"));
        }
        let mut rx = hub.subscribe();
        hub.publish(ev("v"));
        assert_eq!(rx.recv().await.expect("event").seq, 1001);
    }
}

#[cfg(test)]
mod service_tests {
    use std::sync::Arc;

    use futures::StreamExt;

    use super::*;
    use crate::clock::Clock;
    use crate::metrics::Metrics;

    use crate::test_fakes::Never;

    #[tokio::test]
    async fn watch_turns_a_lag_into_one_resync_event_and_filters_by_pod() {
        let hub = Hub::new(2);
        let manager = Manager::new(
            Arc::new(Never),
            Arc::new(Never),
            Arc::new(Metrics::unregistered().expect("metrics")),
            hub.clone(),
            Clock::system(),
        );
        let svc = ProberService::new(manager, hub.clone());
        let mut stream = svc
            .watch(Request::new(api::WatchRequest {
                pod_uid: "mine".into(),
            }))
            .await
            .expect("watch")
            .into_inner();
        for uid in ["mine", "other", "mine", "mine", "other"] {
            hub.publish(api::ProbeEvent {
                pod_uid: uid.to_owned(),
                ..Default::default()
            });
        }
        let first = stream.next().await.expect("item").expect("ok");
        assert_eq!(first.event, Some(api::probe_event::Event::Resync(true)));
        // Only the last two were kept; "other" is filtered out.
        let next = stream.next().await.expect("item").expect("ok");
        assert_eq!((next.pod_uid.as_str(), next.seq), ("mine", 4));
    }
}
