//! The CRI reads every podward daemon makes of containerd (`ListPodSandbox`, `ListContainers`,
//! `PodSandboxStatus`, `ContainerStatus`), answered through [`super::decode`]: an object with an
//! invalid string costs that string (or that object), never the whole answer.

use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::transport::Channel;
use tonic::{IntoRequest, Response, Status};

use super::codec::TolerantCodec;
use super::decode::Decoded;
use crate::cri;
use crate::limits::CRI_MESSAGE_BYTES;

/// A CRI `RuntimeService` client for the read calls, with tolerant decoding of the answers.
#[derive(Clone, Debug)]
pub struct RuntimeReader {
    inner: Grpc<Channel>,
}

impl RuntimeReader {
    /// A reader on `channel`, with CRI's message limits ([`CRI_MESSAGE_BYTES`]).
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: Grpc::new(channel)
                .max_decoding_message_size(CRI_MESSAGE_BYTES)
                .max_encoding_message_size(CRI_MESSAGE_BYTES),
        }
    }

    async fn unary<Req, Resp>(
        &mut self,
        method: &'static str,
        request: impl IntoRequest<Req>,
    ) -> Result<Decoded<Resp>, Status>
    where
        Req: prost::Message + Send + 'static,
        Resp: prost::Message + Default + Send + 'static,
    {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("CRI runtime service not ready: {e}")))?;
        let path = PathAndQuery::from_static(method);
        let codec = TolerantCodec::<Req, Resp>::default();
        self.inner
            .unary(request.into_request(), path, codec)
            .await
            .map(Response::into_inner)
    }

    /// `ListPodSandbox`.
    pub async fn list_pod_sandbox(
        &mut self,
        request: cri::ListPodSandboxRequest,
    ) -> Result<Decoded<cri::ListPodSandboxResponse>, Status> {
        self.unary("/runtime.v1.RuntimeService/ListPodSandbox", request)
            .await
    }

    /// `ListContainers`.
    pub async fn list_containers(
        &mut self,
        request: cri::ListContainersRequest,
    ) -> Result<Decoded<cri::ListContainersResponse>, Status> {
        self.unary("/runtime.v1.RuntimeService/ListContainers", request)
            .await
    }

    /// `PodSandboxStatus`.
    pub async fn pod_sandbox_status(
        &mut self,
        request: cri::PodSandboxStatusRequest,
    ) -> Result<Decoded<cri::PodSandboxStatusResponse>, Status> {
        self.unary("/runtime.v1.RuntimeService/PodSandboxStatus", request)
            .await
    }

    /// `ContainerStatus`.
    pub async fn container_status(
        &mut self,
        request: cri::ContainerStatusRequest,
    ) -> Result<Decoded<cri::ContainerStatusResponse>, Status> {
        self.unary("/runtime.v1.RuntimeService/ContainerStatus", request)
            .await
    }
}
