//! `podward.prober.v1.Prober`: `Status`, `Watch` (de-duplicated result changes and kills) and
//! `CleanupPods`.
//!
//! `Watch` subscribes to the [`Hub`]; a subscriber that falls behind its ring gets one `resync`
//! event (call `Status` again) instead of a silent gap, as the shim's Watch does.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use podward_api::prober::v1 as api;
use podward_api::prober::v1::prober_server::Prober as ProberApi;
use podward_api::wire::announced;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::{Request, Response, Status};

use crate::pods::manager::Manager;
use crate::publish::hub::Hub;

/// Default most Watch subscribers at once (`--max-subscribers`).
pub const MAX_SUBSCRIBERS: usize = 16;

/// The gRPC service.
pub struct ProberService {
    manager: Manager,
    hub: Hub,
    max_subscribers: usize,
}

impl ProberService {
    /// Serves `manager`'s state and `hub`'s events, to at most [`MAX_SUBSCRIBERS`] watchers.
    pub fn new(manager: Manager, hub: Hub) -> Self {
        Self {
            manager,
            hub,
            max_subscribers: MAX_SUBSCRIBERS,
        }
    }

    /// At most `max` Watch streams at once (at least one); one more gets `RESOURCE_EXHAUSTED`.
    pub fn with_max_subscribers(mut self, max: usize) -> Self {
        self.max_subscribers = max.max(1);
        self
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
        Ok(announced(self.manager.view().status(uid.as_deref()), &[]))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        request: Request<api::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let uid = request.into_inner().pod_uid;
        let rx = self
            .hub
            .try_subscribe(self.max_subscribers)
            .map_err(|live| {
                Status::resource_exhausted(format!(
                    "podward-prober: {live} Watch subscribers already connected \
                 (--max-subscribers {}); close one or raise the limit",
                    self.max_subscribers
                ))
            })?;
        let stream = BroadcastStream::new(rx).filter_map(move |item| {
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
        Ok(announced(Box::pin(stream), &[]))
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
        Ok(announced(
            api::CleanupPodsResponse {
                removed_pod_uids: removed,
            },
            &[],
        ))
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
    async fn one_watch_more_than_the_cap_is_resource_exhausted_and_a_closed_one_frees_its_place() {
        let hub = Hub::new(2);
        let manager = test_fakes::manager(Arc::new(Never), Arc::new(Never), &hub, Clock::system());
        let svc = ProberService::new(manager, hub).with_max_subscribers(2);
        let watch = || svc.watch(Request::new(api::WatchRequest::default()));
        let first = watch().await.expect("first");
        let _second = watch().await.expect("second");
        let err = match watch().await {
            Err(e) => e,
            Ok(_) => panic!("a third Watch was accepted"),
        };
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(
            err.message().contains("--max-subscribers 2"),
            "{}",
            err.message()
        );
        drop(first);
        watch().await.expect("a closed Watch frees its place");
    }

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
