//! `podward.prober.v1.Prober`: `Status`, `Watch` (de-duplicated result changes and kills) and
//! `CleanupPods`.
//!
//! `Watch` subscribes to the [`Hub`]; a subscriber that falls behind its ring gets one `resync`
//! event (call `Status` again) instead of a silent gap, as the shim's Watch does.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use podward_api::prober::v1 as api;
use podward_api::prober::v1::prober_server::Prober as ProberApi;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::{Request, Response, Status};

use crate::hub::Hub;
use crate::manager::Manager;

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
    use std::sync::Arc;

    use futures::StreamExt;

    use super::*;
    use crate::clock::Clock;
    use crate::test_fakes::{self, Never};

    #[tokio::test]
    async fn watch_turns_a_lag_into_one_resync_event_and_filters_by_pod() {
        let hub = Hub::new(2);
        let manager = test_fakes::manager(Arc::new(Never), Arc::new(Never), &hub, Clock::system());
        let svc = ProberService::new(manager, hub.clone());
        let mut stream = svc
            .watch(Request::new(api::WatchRequest {
                pod_uid: "mine".into(),
            }))
            .await
            .expect("watch")
            .into_inner();
        for uid in ["mine", "other", "mine", "mine", "other"] {
            hub.send(api::ProbeEvent {
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
