//! Observation of the watched CRI methods: the CRI calls read from each connection's HTTP/2
//! streams (`connection.rs`, `calls.rs`), which paths are watched, the raw bytes kept for them,
//! and decoding those bytes (off the relay path, in one task) into [`Observation`]s for the
//! index.
//!
//! Only the lifecycle calls below are ever decoded. Everything else (PullImage with its registry
//! credentials, Exec, unknown methods) is relayed without a copy.

mod calls;
mod connection;
mod decode;
mod digest;
mod grpc_headers;
mod unchanged;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use bytes::{Buf, Bytes};

use crate::heal::Blindness;
use crate::index::Observation;
use crate::metrics::Metrics;
use crate::publish::Publisher;

pub(crate) use digest::{Digest, Digester};
/// How often a repeating large List/Status answer is read at most, per request, by default.
pub use unchanged::READ_INTERVAL as REPEAT_READ_INTERVAL;
pub(crate) use unchanged::{Reading, Unchanged, Verdict};

pub use calls::Recorder;
pub use connection::{Conversation, SideReader};
pub use decode::decode;

/// Raw observations waiting for the decoder; a full queue drops the observation (counted, and
/// the index healed by a relist) rather than slow a CRI call.
pub const QUEUE_LEN: usize = 4096;

/// Bytes of call bodies the decoder's queue may hold, whatever the number of entries: a few
/// changed multi-MiB Lists, not a node's worth of memory.
pub const QUEUE_BYTES: usize = 32 << 20;

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

impl Raw {
    /// Bytes of call bodies it holds.
    fn body_bytes(&self) -> usize {
        match self {
            Self::Request { body, .. } => body.len(),
            Self::Call {
                request, response, ..
            } => request.len() + response.len(),
        }
    }
}

/// The sending side, used by the relay's readers.
#[derive(Clone, Debug)]
pub struct Observer {
    tx: mpsc::SyncSender<Raw>,
    /// Body bytes queued (added here, taken off by the decoder).
    queued: Arc<AtomicUsize>,
    metrics: Metrics,
    blindness: Arc<Blindness>,
    /// The index's count of removed entries ([`Publisher::removals`]).
    removals: Arc<std::sync::atomic::AtomicU64>,
}

impl Observer {
    /// How many entries the index lost so far.
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Relaxed)
    }

    /// Queues a raw observation without waiting; when the decoder lags (entries or bytes), it is
    /// dropped, counted, the index healed by a relist, and false returned.
    pub fn send(&self, raw: Raw) -> bool {
        let bytes = raw.body_bytes();
        let before = self.queued.fetch_add(bytes, Ordering::Relaxed);
        let sent = before + bytes <= QUEUE_BYTES && self.tx.try_send(raw).is_ok();
        if sent {
            self.metrics
                .decoder_queue_bytes
                .set(i64::try_from(before + bytes).unwrap_or(i64::MAX));
        } else {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.metrics.observations_dropped.inc();
            self.blindness.call_lost();
        }
        sent
    }

    /// Where losses of observation are reported.
    pub fn blindness(&self) -> &Arc<Blindness> {
        &self.blindness
    }

    /// An observer whose raw observations go to the returned receiver instead of a decoder
    /// (tests and tools that look at what the reader saw). Nothing takes bodies off its byte
    /// count: after [`QUEUE_BYTES`] of bodies, further observations are dropped.
    pub fn channel(metrics: Metrics) -> (Self, mpsc::Receiver<Raw>) {
        let (tx, rx) = mpsc::sync_channel(QUEUE_LEN);
        let blindness = Blindness::new(metrics.clone());
        let observer = Self {
            tx,
            queued: Arc::default(),
            metrics,
            blindness,
            removals: Arc::default(),
        };
        (observer, rx)
    }
}

/// Creates the observer and its decoder, which folds decoded observations into `publisher`.
///
/// The decoder is a thread of its own, not a task on the relay's runtime: a changed 4 MiB List
/// takes milliseconds to decode and fold into the index, and on the runtime's one thread those
/// milliseconds would be taken from the copies of every connection (measured in
/// docs/benchmarks.md). The queue between them stays bounded in entries ([`QUEUE_LEN`]) and
/// bytes ([`QUEUE_BYTES`]); the thread (returned) ends once every [`Observer`] is dropped and
/// the queue is drained.
pub fn spawn(
    publisher: Publisher,
    metrics: Metrics,
) -> std::io::Result<(Observer, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::sync_channel::<Raw>(QUEUE_LEN);
    let observer = Observer {
        tx,
        queued: Arc::default(),
        metrics: metrics.clone(),
        blindness: Blindness::new(metrics.clone()),
        removals: publisher.removals(),
    };
    let decoder = Decoder {
        queued: observer.queued.clone(),
        blindness: observer.blindness.clone(),
        metrics,
    };
    let thread = std::thread::Builder::new()
        .name("shim-decoder".into())
        .spawn(move || decoder.run(&rx, &publisher))?;
    Ok((observer, thread))
}

/// Raw observations holding at least this much body make the decoder give freed memory back to
/// the kernel once they stop coming (see [`run_decoder`]).
const LARGE_BODIES: usize = 1 << 20;

/// The decoder thread's side of the queue.
struct Decoder {
    queued: Arc<AtomicUsize>,
    blindness: Arc<Blindness>,
    metrics: Metrics,
}

impl Decoder {
    fn run(&self, rx: &mpsc::Receiver<Raw>, publisher: &Publisher) {
        let mut last_large: Option<Instant> = None;
        loop {
            let raw = match last_large {
                None => match rx.recv() {
                    Ok(raw) => raw,
                    Err(mpsc::RecvError) => return,
                },
                Some(at) => match rx.recv_timeout(
                    (at + crate::memory::RELEASE_AFTER).saturating_duration_since(Instant::now()),
                ) {
                    Ok(raw) => raw,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        // A multi-MiB answer leaves megabytes of freed heap behind it (its read
                        // buffers, the decoded copy folded into the index) that glibc keeps for
                        // the process unless asked.
                        crate::memory::release_free_heap();
                        last_large = None;
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
            };
            let bytes = raw.body_bytes();
            let left = self.queued.fetch_sub(bytes, Ordering::Relaxed) - bytes;
            self.metrics
                .decoder_queue_bytes
                .set(i64::try_from(left).unwrap_or(i64::MAX));
            if bytes >= LARGE_BODIES {
                last_large = Some(Instant::now());
            }
            // A decoder bug on one hostile message must cost that observation (healed by a
            // relist), not the thread every later observation needs.
            let Ok((observations, repairs)) =
                std::panic::catch_unwind(AssertUnwindSafe(|| decode(raw)))
            else {
                tracing::error!("the decoder panicked on an observed call; relisting");
                self.metrics.observations_dropped.inc();
                self.blindness.call_lost();
                continue;
            };
            if repairs.undecodable {
                // What it told is lost: a relist tells it again.
                self.metrics.observations_dropped.inc();
                self.blindness.call_lost();
            }
            for r in &repairs.made {
                self.metrics.count_repair(r);
                // kubelet relists every second: the same bad object would flood the log.
                tracing::debug!(repair = %r, "observed CRI message repaired");
            }
            for obs in observations {
                if let Observation::Truncated {
                    sandbox_ids,
                    container_ids,
                } = &obs
                {
                    self.metrics
                        .index_truncated
                        .with_label_values(&["sandbox"])
                        .inc_by(sandbox_ids.len() as u64);
                    self.metrics
                        .index_truncated
                        .with_label_values(&["container"])
                        .inc_by(container_ids.len() as u64);
                    tracing::debug!(
                        ?sandbox_ids,
                        ?container_ids,
                        "a kept field was past its bound; the entry is published truncated"
                    );
                }
                publisher.apply(obs);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
