//! The rebuild's and the relists' CRI reads of containerd, each answer cut down on the wire to
//! what the index keeps ([`crate::keep::prune`]) before it is decoded: a restart reads the same
//! fields as the CRI path, never the environment, mounts or unread annotations whole.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use http::uri::PathAndQuery;
use podward_api::cri;
use podward_api::limits::CRI_MESSAGE_BYTES;
use podward_api::tolerant::{self, Repair};
use tonic::Status;
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::transport::Channel;
use tonic_prost::ProstEncoder;

use crate::keep::prune::{self, Shape};

/// A cut-down answer.
#[derive(Debug)]
pub struct Kept<M> {
    /// The message, with only the kept fields.
    pub message: M,
    /// Fields repaired or objects dropped while decoding it.
    pub repairs: Vec<Repair>,
    /// IDs of the objects in it with a kept field past its bound.
    pub truncated_ids: Vec<String>,
}

/// A `RuntimeService` client for the reads a rebuild makes.
#[derive(Clone, Debug)]
pub struct KeptReader {
    inner: Grpc<Channel>,
}

impl KeptReader {
    /// A reader on `channel`, with CRI's message limits.
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: Grpc::new(channel)
                .max_decoding_message_size(CRI_MESSAGE_BYTES)
                .max_encoding_message_size(CRI_MESSAGE_BYTES),
        }
    }

    async fn raw<Req: prost::Message + Send + 'static>(
        &mut self,
        method: &'static str,
        request: Req,
    ) -> Result<Bytes, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("CRI runtime service not ready: {e}")))?;
        let codec = RawCodec::<Req>(PhantomData);
        self.inner
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(method),
                codec,
            )
            .await
            .map(tonic::Response::into_inner)
    }

    async fn kept<Req, Resp>(
        &mut self,
        method: &'static str,
        request: Req,
        shape: Shape,
    ) -> Result<Kept<Resp>, Status>
    where
        Req: prost::Message + Send + 'static,
        Resp: prost::Message + Default,
    {
        let raw = self.raw(method, request).await?;
        let pruned = prune::prune(raw, shape, &BTreeSet::new())
            .map_err(|e| Status::internal(e.to_string()))?;
        let decoded = tolerant::decode::<Resp, _>(&pruned.bytes[..])
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Kept {
            message: decoded.message,
            repairs: decoded.repairs,
            truncated_ids: pruned.truncated_ids,
        })
    }

    /// `ListPodSandbox`, unfiltered.
    pub async fn list_pod_sandbox(&mut self) -> Result<Kept<cri::ListPodSandboxResponse>, Status> {
        self.kept(
            "/runtime.v1.RuntimeService/ListPodSandbox",
            cri::ListPodSandboxRequest::default(),
            prune::LIST_POD_SANDBOX_RESPONSE,
        )
        .await
    }

    /// `ListContainers`, unfiltered.
    pub async fn list_containers(&mut self) -> Result<Kept<cri::ListContainersResponse>, Status> {
        self.kept(
            "/runtime.v1.RuntimeService/ListContainers",
            cri::ListContainersRequest::default(),
            prune::LIST_CONTAINERS_RESPONSE,
        )
        .await
    }

    /// `PodSandboxStatus`, not verbose.
    pub async fn pod_sandbox_status(
        &mut self,
        id: &str,
    ) -> Result<Kept<cri::PodSandboxStatusResponse>, Status> {
        let request = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        };
        self.kept(
            "/runtime.v1.RuntimeService/PodSandboxStatus",
            request,
            prune::POD_SANDBOX_STATUS_RESPONSE,
        )
        .await
    }

    /// `ContainerStatus`, not verbose.
    pub async fn container_status(
        &mut self,
        id: &str,
    ) -> Result<Kept<cri::ContainerStatusResponse>, Status> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        self.kept(
            "/runtime.v1.RuntimeService/ContainerStatus",
            request,
            prune::CONTAINER_STATUS_RESPONSE,
        )
        .await
    }

    /// The variables of `names` in the container's environment (its OCI spec, from a verbose
    /// `ContainerStatus`), in order, and whether some were past the bound; `None` when the spec
    /// could not be read.
    pub async fn container_env(
        &mut self,
        id: &str,
        names: &BTreeSet<String>,
    ) -> Result<Option<KeptEnv>, Status> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: true,
        };
        let raw = self
            .raw("/runtime.v1.RuntimeService/ContainerStatus", request)
            .await?;
        let info = prune::map_value(raw, 2, "info").map_err(|e| Status::internal(e.to_string()))?;
        Ok(info.and_then(|json| env_from_info(&json, names)))
    }
}

/// Environment variables kept, in order, and whether some were left out past
/// [`crate::keep::ENV_BYTES`].
pub type KeptEnv = (Vec<(String, String)>, bool);

/// The variables of `names` in an OCI runtime spec's environment (`runtimeSpec.process.env` of a
/// verbose ContainerStatus's `info`), in order, up to [`crate::keep::ENV_BYTES`]; `None` when it
/// is not such JSON.
///
/// Only the environment is deserialized (serde skips every other field of the spec without
/// building it), and each variable is read in place from the JSON unless it has escapes: the
/// spec of a container with megabytes of environment is never built whole, as
/// `oci_spec::runtime::Spec` would.
pub fn env_from_info(json: &[u8], names: &BTreeSet<String>) -> Option<KeptEnv> {
    #[derive(serde::Deserialize)]
    struct Info<'a> {
        #[serde(rename = "runtimeSpec", borrow)]
        runtime_spec: Option<Spec<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Spec<'a> {
        #[serde(borrow)]
        process: Option<Process<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Process<'a> {
        #[serde(borrow, default)]
        env: Vec<Cow<'a, str>>,
    }
    let info: Info<'_> = serde_json::from_slice(json).ok()?;
    let env = info
        .runtime_spec?
        .process
        .map(|p| p.env)
        .unwrap_or_default();
    let (mut kept, mut used, mut truncated) = (Vec::new(), 0, false);
    for e in &env {
        let (k, v) = e.split_once('=').unwrap_or((e, ""));
        if !names.contains(k) {
            continue;
        }
        if used + k.len() + v.len() > crate::keep::ENV_BYTES {
            truncated = true;
            continue;
        }
        used += k.len() + v.len();
        kept.push((k.to_owned(), v.to_owned()));
    }
    Some((kept, truncated))
}

/// Encodes requests with prost; hands answers over as their bytes.
struct RawCodec<Req>(PhantomData<fn(Req)>);

struct RawDecoder;

impl<Req: prost::Message + Send + 'static> Codec for RawCodec<Req> {
    type Encode = Req;
    type Decode = Bytes;
    type Encoder = ProstEncoder<Req>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        // `DecodeBuf` over a `BytesMut`: this takes the message's bytes without copying them.
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_variables_are_read_from_the_spec_in_order() {
        let info = serde_json::json!({
            "sandboxID": "s1",
            "runtimeSpec": {
                "ociVersion": "1.0.2",
                "process": {"cwd": "/", "env": ["PATH=/bin", "A=1=2", "EMPTY=", "B=\"q\"", "C"], "user": {"uid": 0, "gid": 0}},
                "mounts": [{"destination": "/x"}],
                "root": {"path": "rootfs"}
            }
        });
        let names: BTreeSet<String> = ["A", "EMPTY", "B", "C"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let (env, truncated) = env_from_info(info.to_string().as_bytes(), &names).expect("env");
        assert!(!truncated);
        assert_eq!(
            env,
            vec![
                ("A".to_owned(), "1=2".to_owned()),
                ("EMPTY".to_owned(), String::new()),
                ("B".to_owned(), "\"q\"".to_owned()),
                ("C".to_owned(), String::new()),
            ]
        );
        assert!(env_from_info(b"{not json", &names).is_none());
        let big = format!("A={}", "x".repeat(crate::keep::ENV_BYTES));
        let info = serde_json::json!({"runtimeSpec": {"process": {"env": [big, "B=1"]}}});
        let (env, truncated) = env_from_info(info.to_string().as_bytes(), &names).expect("env");
        assert!(truncated);
        assert_eq!(env, vec![("B".to_owned(), "1".to_owned())]);
    }
}
