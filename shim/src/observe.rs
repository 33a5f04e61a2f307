//! Observation of the watched CRI methods: which paths are watched, the raw bytes the relay's
//! reader keeps for them, and decoding those bytes (off the relay path, in one task) into
//! [`Observation`]s for the index.
//!
//! Only the lifecycle calls below are ever decoded. Everything else (PullImage with its registry
//! credentials, Exec, unknown methods) is relayed without a copy.

mod decode;

use std::hash::{BuildHasher, Hasher};

use bytes::{Buf, Bytes};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::publish::Publisher;

pub use decode::decode;

/// Raw observations waiting for the decoder; a full queue drops the observation (counted) rather
/// than slow a CRI call.
pub const QUEUE_LEN: usize = 4096;

/// A CRI method whose calls feed the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

    /// Whether the call changes runtime state: its every answer is news (never skipped as a
    /// repeat), and its outcome decides whether a result was undelivered.
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

/// A gRPC-framed body as it arrived: the DATA payloads, in order, not yet joined (joining is
/// the decoder's job, off the relay path).
#[derive(Debug, Clone, Default)]
pub struct Body {
    parts: Vec<Bytes>,
    len: usize,
}

impl Body {
    /// A body of one part.
    pub fn from_bytes(b: Bytes) -> Self {
        let mut body = Self::default();
        body.push(b);
        body
    }

    /// Appends a part.
    pub fn push(&mut self, part: Bytes) {
        self.len += part.len();
        self.parts.push(part);
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole body in one buffer (a copy only when it came in several parts).
    pub fn to_bytes(&self) -> Bytes {
        match &self.parts[..] {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => Bytes::from(many.concat()),
        }
    }

    /// The first gRPC message (`[compressed:u8][len:u32 BE][message]`), read in place across
    /// the parts: a multi-MiB List is decoded without first being joined into one buffer. None
    /// for a compressed message (kubelet never compresses CRI) or a truncated body.
    pub fn first_message(&self) -> Option<impl Buf + Clone + '_> {
        let mut buf = Parts {
            parts: &self.parts,
            idx: 0,
            off: 0,
            left: self.len,
        };
        if buf.remaining() < 5 || buf.get_u8() != 0 {
            return None;
        }
        let len = usize::try_from(buf.get_u32()).ok()?;
        if buf.remaining() < len {
            return None;
        }
        buf.left = len;
        Some(buf)
    }

    /// Whether the first message carries gRPC's compressed flag.
    pub fn is_compressed(&self) -> bool {
        self.parts
            .iter()
            .find(|p| !p.is_empty())
            .is_some_and(|p| p[0] != 0)
    }

    fn hash_into(&self, h: &mut impl Hasher) {
        for p in &self.parts {
            h.write(p);
        }
    }
}

/// Raw bytes of one observed call, decoded later by [`decode`].
#[derive(Debug)]
pub enum Raw {
    /// The request of a [`Watched::request_is_news`] method is complete.
    Request {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body.
        body: Body,
        /// When the request arrived (Unix ns).
        at_ns: i64,
    },
    /// The call ended.
    Call {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body (as far as it was read).
        request: Body,
        /// The gRPC-framed response body (empty for a trailers-only answer).
        response: Body,
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

/// The sending side, used by the relay's readers.
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

impl Observer {
    /// An observer whose raw observations go to the returned receiver instead of a decoder
    /// (tests and tools that look at what the reader saw).
    pub fn channel(metrics: Metrics) -> (Self, mpsc::Receiver<Raw>) {
        let (tx, rx) = mpsc::channel(QUEUE_LEN);
        (Self { tx, metrics }, rx)
    }
}

/// Creates the observer and its decoder task, which folds decoded observations into `publisher`.
pub fn spawn(publisher: Publisher, metrics: Metrics) -> Observer {
    let (tx, mut rx) = mpsc::channel::<Raw>(QUEUE_LEN);
    let task_metrics = metrics.clone();
    tokio::spawn(async move {
        let metrics = task_metrics;
        let mut unchanged = Unchanged::default();
        while let Some(raw) = rx.recv().await {
            if unchanged.is_repeat(&raw) {
                continue;
            }
            let (observations, repairs) = decode(raw);
            for r in &repairs.0 {
                metrics.count_repair(r);
                // kubelet relists every second: the same bad object would flood the log.
                tracing::debug!(repair = %r, "observed CRI message repaired");
            }
            for obs in observations {
                publisher.apply(obs);
            }
        }
    });
    Observer { tx, metrics }
}

/// A window of `left` bytes over a body's parts, from part `idx`, offset `off`.
#[derive(Clone)]
struct Parts<'a> {
    parts: &'a [Bytes],
    idx: usize,
    off: usize,
    left: usize,
}

impl Buf for Parts<'_> {
    fn remaining(&self) -> usize {
        self.left
    }

    fn chunk(&self) -> &[u8] {
        match self.parts.get(self.idx) {
            Some(p) => {
                let c = &p[self.off..];
                &c[..c.len().min(self.left)]
            }
            None => &[],
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        cnt = cnt.min(self.left);
        self.left -= cnt;
        while cnt > 0 {
            let Some(p) = self.parts.get(self.idx) else {
                return;
            };
            let here = p.len() - self.off;
            if cnt < here {
                self.off += cnt;
                return;
            }
            cnt -= here;
            self.idx += 1;
            self.off = 0;
        }
        // Skip empty parts so that `chunk` is never empty while bytes remain.
        while self
            .parts
            .get(self.idx)
            .is_some_and(|p| self.off >= p.len())
        {
            self.idx += 1;
            self.off = 0;
        }
    }
}

/// Distinct List/Status requests remembered; past it the memory starts afresh.
const UNCHANGED_ENTRIES: usize = 4096;

/// A digest of the last answer to each distinct List/Status request. kubelet relists every
/// second and the answer is usually byte-identical to the previous one: such a repeat carries no
/// news and is not decoded (decoding a 100-container list costs more CPU than relaying it).
/// Digests rather than the answers themselves keep this a few hundred KiB at most. foldhash
/// (randomly seeded per process) rather than std's SipHash: hashing a 100-container answer is on
/// the decoder's CPU budget for every relist, and foldhash is several times faster. A collision
/// would only skip decoding one changed answer; the next change, event or rebuild repairs it.
#[derive(Default)]
struct Unchanged {
    keys: foldhash::fast::RandomState,
    last: std::collections::HashMap<(Watched, u64), u64>,
}

impl Unchanged {
    fn digest(&self, body: &Body) -> u64 {
        let mut h = self.keys.build_hasher();
        body.hash_into(&mut h);
        h.write_usize(body.len());
        h.finish()
    }

    fn is_repeat(&mut self, raw: &Raw) -> bool {
        let Raw::Call {
            method,
            request,
            response,
            grpc_status: Some(0),
            ..
        } = raw
        else {
            return false;
        };
        if method.is_mutating() {
            return false;
        }
        let key = (*method, self.digest(request));
        let answer = self.digest(response);
        if self.last.get(&key) == Some(&answer) {
            return true;
        }
        if self.last.len() >= UNCHANGED_ENTRIES {
            self.last.clear();
        }
        self.last.insert(key, answer);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(resp: &'static [u8], status: Option<i32>) -> Raw {
        Raw::Call {
            method: Watched::ListContainers,
            request: Body::from_bytes(Bytes::from_static(b"\0\0\0\0\0")),
            response: Body::from_bytes(Bytes::from_static(resp)),
            grpc_status: status,
            outcome: Outcome::Delivered,
            requested_at_ns: 0,
            completed_at_ns: 0,
        }
    }

    #[test]
    fn identical_list_answers_are_skipped_but_changes_and_mutations_are_not() {
        let mut u = Unchanged::default();
        assert!(!u.is_repeat(&list(b"a", Some(0))));
        assert!(u.is_repeat(&list(b"a", Some(0))));
        assert!(
            !u.is_repeat(&list(b"b", Some(0))),
            "a changed answer is news"
        );
        assert!(
            !u.is_repeat(&list(b"b", Some(14))),
            "failed calls are never deduplicated"
        );
        let run = Raw::Call {
            method: Watched::RunPodSandbox,
            request: Body::default(),
            response: Body::from_bytes(Bytes::from_static(b"x")),
            grpc_status: Some(0),
            outcome: Outcome::Delivered,
            requested_at_ns: 0,
            completed_at_ns: 0,
        };
        assert!(!u.is_repeat(&run));
        assert!(!u.is_repeat(&run), "mutating calls always count");
    }

    fn message_of(parts: &[&'static [u8]]) -> Option<Vec<u8>> {
        let mut body = Body::default();
        for p in parts {
            body.push(Bytes::from_static(p));
        }
        let mut m = body.first_message()?;
        Some(m.copy_to_bytes(m.remaining()).to_vec())
    }

    #[test]
    fn first_message_reads_across_parts_and_rejects_truncated_and_compressed_frames() {
        assert_eq!(message_of(&[&[0, 0, 0, 0, 2, 7, 8]]), Some(vec![7, 8]));
        assert_eq!(
            message_of(&[&[0, 0], &[], &[0, 0, 3, 7], &[8], &[9, 99]]),
            Some(vec![7, 8, 9]),
            "split anywhere, the prefix included; what follows the message is not read"
        );
        assert_eq!(message_of(&[&[0, 0, 0, 0, 3, 7, 8]]), None);
        assert_eq!(message_of(&[&[1, 0, 0, 0, 1, 7]]), None);
        assert_eq!(message_of(&[&[0, 0, 0]]), None);
        assert_eq!(message_of(&[]), None);
    }
}
