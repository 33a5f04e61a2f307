//! Observation of the watched CRI methods: which paths are watched, the raw bytes the forwarder
//! tees off for them, and decoding those bytes (off the forwarding path, in one task) into
//! [`Observation`]s for the index.
//!
//! Only the lifecycle calls below are ever decoded. Everything else (PullImage with its registry
//! credentials, Exec, unknown methods) is forwarded without a copy.

mod decode;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::publish::Publisher;

pub use decode::decode;

/// Largest message body teed for observation; a bigger one is forwarded but not observed
/// (memory stays bounded). containerd's own limit is 16 MiB.
pub const MAX_OBSERVED_BYTES: usize = 32 << 20;

/// Raw observations waiting for the decoder; a full queue drops the observation (counted) rather
/// than slow a CRI call.
pub const QUEUE_LEN: usize = 4096;

/// A CRI method whose calls feed the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// `RunPodSandbox`.
    RunPodSandbox,
    /// `StopPodSandbox`.
    StopPodSandbox,
    /// `RemovePodSandbox`.
    RemovePodSandbox,
    /// `CreateContainer`.
    CreateContainer,
    /// `StartContainer`.
    StartContainer,
    /// `StopContainer`.
    StopContainer,
    /// `RemoveContainer`.
    RemoveContainer,
    /// `ListPodSandbox`.
    ListPodSandbox,
    /// `ListContainers`.
    ListContainers,
    /// `PodSandboxStatus`.
    PodSandboxStatus,
    /// `ContainerStatus`.
    ContainerStatus,
}

impl Watched {
    /// The watched method named by a gRPC `:path`, if any.
    pub fn from_path(path: &str) -> Option<Self> {
        let method = path.strip_prefix("/runtime.v1.RuntimeService/")?;
        Some(match method {
            "RunPodSandbox" => Self::RunPodSandbox,
            "StopPodSandbox" => Self::StopPodSandbox,
            "RemovePodSandbox" => Self::RemovePodSandbox,
            "CreateContainer" => Self::CreateContainer,
            "StartContainer" => Self::StartContainer,
            "StopContainer" => Self::StopContainer,
            "RemoveContainer" => Self::RemoveContainer,
            "ListPodSandbox" => Self::ListPodSandbox,
            "ListContainers" => Self::ListContainers,
            "PodSandboxStatus" => Self::PodSandboxStatus,
            "ContainerStatus" => Self::ContainerStatus,
            _ => return None,
        })
    }

    /// Whether the call changes runtime state: its result matters even when the caller has gone,
    /// so the forwarder reads the response to the end instead of cancelling it.
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Self::RunPodSandbox
                | Self::StopPodSandbox
                | Self::RemovePodSandbox
                | Self::CreateContainer
                | Self::StartContainer
                | Self::StopContainer
                | Self::RemoveContainer
        )
    }

    /// Whether the request alone is news (kubelet decided to stop something), published as soon
    /// as the request body is in, long before the response (which can take the grace period).
    pub fn request_is_news(self) -> bool {
        matches!(self, Self::StopPodSandbox | Self::StopContainer)
    }
}

/// What happened to the response of an observed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole response, trailers included, was handed to the caller's stream.
    Delivered,
    /// containerd answered but the caller had gone (hang-up, reset or deadline) first.
    Undelivered,
    /// The caller went away before containerd answered; the call was cancelled upstream.
    Abandoned,
}

/// Raw bytes of one observed call, decoded later by [`decode`].
#[derive(Debug)]
pub enum Raw {
    /// The request of a [`Watched::request_is_news`] method is complete.
    Request {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body.
        body: Bytes,
        /// When the request arrived (Unix ns).
        at_ns: i64,
    },
    /// The call ended.
    Call {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body (as far as it was read).
        request: Bytes,
        /// The gRPC-framed response body (empty for a trailers-only answer).
        response: Bytes,
        /// The `grpc-status` (None when the stream ended without one).
        grpc_status: Option<i32>,
        /// Whether the caller got it.
        outcome: Outcome,
        /// When the request arrived (Unix ns).
        requested_at_ns: i64,
        /// When the call ended (Unix ns).
        completed_at_ns: i64,
    },
}

/// The sending side, used by the forwarder.
#[derive(Clone, Debug)]
pub struct Observer {
    tx: mpsc::Sender<Raw>,
    metrics: Metrics,
}

impl Observer {
    /// Queues a raw observation without waiting; when the decoder lags, it is dropped and
    /// counted.
    pub fn send(&self, raw: Raw) {
        if self.tx.try_send(raw).is_err() {
            self.metrics.observations_dropped.inc();
        }
    }
}

/// Creates the observer and its decoder task, which folds decoded observations into `publisher`.
pub fn spawn(publisher: Publisher, metrics: Metrics) -> Observer {
    let (tx, mut rx) = mpsc::channel::<Raw>(QUEUE_LEN);
    tokio::spawn(async move {
        while let Some(raw) = rx.recv().await {
            for obs in decode(raw) {
                publisher.apply(obs);
            }
        }
    });
    Observer { tx, metrics }
}

/// The first gRPC message in a framed body: `[compressed:u8][len:u32 BE][message]`. None for a
/// compressed message (kubelet never compresses CRI) or a truncated body.
pub fn first_message(body: &[u8]) -> Option<&[u8]> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let (len, msg) = rest.split_at(4);
    let len = usize::try_from(u32::from_be_bytes([len[0], len[1], len[2], len[3]])).ok()?;
    msg.get(..len)
}
