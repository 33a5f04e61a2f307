//! `podward.shim.v1.Lifecycle` on the control socket: `Snapshot` and `Watch`.
//!
//! A Watch's first snapshot waits for the index's rebuild from the runtime (a shim that has
//! just started knows only what it relayed), so every snapshot a subscriber receives is the
//! node's whole set (`Snapshot.complete`); `Snapshot` answers at once and says whether it is.
//!
//! Bounds: at most `max_subscribers` Watch streams (one more gets `RESOURCE_EXHAUSTED`), a
//! handshake deadline for every connection ([`incoming`], over podward-api's shared
//! `daemon::grpc` bounds), and on shutdown every Watch stream
//! ends with `UNAVAILABLE` so that subscribers resubscribe (to the next shim) instead of holding
//! the process open.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use podward_api::daemon::stop::Stop;
use podward_api::limits::API_MESSAGE_BYTES;
use podward_api::shim::v1::lifecycle_server::{Lifecycle, LifecycleServer};
use podward_api::shim::v1::{Snapshot, SnapshotRequest, WatchEvent, WatchRequest};
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;
use crate::publish::Publisher;

pub use podward_api::daemon::grpc::Prefaced;

/// The Lifecycle service over a [`Publisher`].
pub struct LifecycleApi {
    publisher: Publisher,
    max_subscribers: usize,
    stop: Stop,
    metrics: Metrics,
}

impl LifecycleApi {
    /// The tonic service for `publisher`; Watch streams end when `stop` fires.
    pub fn service(
        publisher: Publisher,
        max_subscribers: usize,
        stop: Stop,
        metrics: Metrics,
    ) -> LifecycleServer<Self> {
        LifecycleServer::new(Self {
            publisher,
            max_subscribers,
            stop,
            metrics,
        })
        .max_encoding_message_size(API_MESSAGE_BYTES)
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Lifecycle for LifecycleApi {
    async fn snapshot(&self, _req: Request<SnapshotRequest>) -> Result<Response<Snapshot>, Status> {
        Ok(Response::new(self.publisher.snapshot()))
    }

    type WatchStream = WatchStream;

    async fn watch(&self, _req: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        if self.stop.is_stopped() {
            return Err(shutting_down());
        }
        // Until the index is rebuilt from the runtime it lists only what the relay happened to
        // see: a subscriber that took it for the node's whole set would drop every pod it does
        // not list. So the first snapshot waits for the rebuild (the subscriber keeps the view
        // it had meanwhile); a shim that stops first ends the call as it ends a stream.
        if !self.publisher.is_complete() {
            tracing::debug!("Watch waits for the index rebuild");
            tokio::select! {
                () = self.publisher.until_complete() => {}
                () = self.stop.stopped() => return Err(shutting_down()),
            }
        }
        // `from_seq` is accepted but every Watch starts with a snapshot (no replay buffer yet).
        let sub = self
            .publisher
            .try_subscribe(self.max_subscribers)
            .map_err(|connected| {
                self.metrics.watch_rejected.inc();
                Status::resource_exhausted(format!(
                    "podward-shim: {connected} Watch subscribers already connected \
                     (--max-subscribers {}); close one or raise the limit",
                    self.max_subscribers
                ))
            })?;
        let stream = sub
            .map(Ok)
            .take_until(self.stop.stopped())
            .chain(futures::stream::once(async { Err(shutting_down()) }));
        Ok(Response::new(Box::pin(stream)))
    }
}

fn shutting_down() -> Status {
    Status::unavailable(
        "podward-shim is shutting down; subscribe again (the next shim rebuilds the same index)",
    )
}

/// The control socket's connections, admitted once they sent the HTTP/2 preface within
/// `timeout` (`podward_api::daemon::grpc::incoming`); each one that did not is counted in
/// `podward_shim_handshake_timeouts_total{socket="control"}`.
pub fn incoming(
    listener: tokio::net::UnixListener,
    timeout: std::time::Duration,
    metrics: Metrics,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<Prefaced>> {
    let on_timeout = move || {
        metrics
            .handshake_timeouts
            .with_label_values(&["control"])
            .inc();
    };
    podward_api::daemon::grpc::incoming(
        listener,
        "control",
        timeout,
        std::sync::Arc::new(on_timeout),
        stop,
    )
}
