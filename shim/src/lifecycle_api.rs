//! `podward.shim.v1.Lifecycle` on the control socket: `Snapshot` and `Watch`.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use podward_api::limits::API_MESSAGE_BYTES;
use podward_api::shim::v1::lifecycle_server::{Lifecycle, LifecycleServer};
use podward_api::shim::v1::{Snapshot, SnapshotRequest, WatchEvent, WatchRequest};
use tonic::{Request, Response, Status};

use crate::publish::Publisher;

/// The Lifecycle service over a [`Publisher`].
pub struct LifecycleApi {
    publisher: Publisher,
}

impl LifecycleApi {
    /// The tonic service for `publisher`.
    pub fn service(publisher: Publisher) -> LifecycleServer<Self> {
        LifecycleServer::new(Self { publisher }).max_encoding_message_size(API_MESSAGE_BYTES)
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
        // `from_seq` is accepted but every Watch starts with a snapshot (no replay buffer yet).
        let sub = self.publisher.subscribe();
        Ok(Response::new(Box::pin(sub.map(Ok))))
    }
}
