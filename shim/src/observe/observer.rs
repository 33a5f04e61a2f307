//! The queue from the relay's readers to the decoder: the [`Observer`] each reader sends raw
//! calls through without waiting, and the decoder thread that turns them into index
//! observations off the relay path.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use super::decode::decode;
use super::raw::Raw;
use crate::index::Observation;
use crate::metrics::Metrics;
use crate::publish::Publisher;
use crate::runtime::heal::Blindness;

/// Raw observations waiting for the decoder; a full queue drops the observation (counted, and
/// the index healed by a relist) rather than slow a CRI call.
pub const QUEUE_LEN: usize = 4096;

/// Bytes of call bodies the decoder's queue may hold, whatever the number of entries: a few
/// changed multi-MiB Lists, not a node's worth of memory.
pub const QUEUE_BYTES: usize = 32 << 20;

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
/// the kernel once they stop coming (see [`Decoder::run`]).
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
