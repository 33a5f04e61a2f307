//! Publishing index changes to Watch subscribers.
//!
//! The index, the sequence counter and the subscriber list sit behind one lock, so every
//! subscriber sees changes in the same order with consecutive `seq`. Each subscriber has its own
//! bounded queue; publishing is a `try_send`, never an await. A subscriber whose queue is full is
//! flagged: it gets no more events until it has drained its queue, and then receives a fresh
//! snapshot with `resync = true` (see `publish/subscriber.rs`). So a slow subscriber costs
//! nothing to the relay path or to the others, and never sees a silent gap. An event is one
//! reference-counted allocation shared by every queue it is in; a subscriber's stream takes its
//! own copy only when it hands the event to its connection's encoder (the last one to take it
//! takes it without a copy).

mod subscriber;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use podward_api::shim::v1::{
    ContainerEvent, ContainerEventKind, SandboxEvent, SandboxEventKind, Snapshot, WatchEvent,
    watch_event,
};
use tokio::sync::{mpsc, watch};

use crate::index::{Change, Index, Observation};
use crate::memory::Release;
use crate::metrics::Metrics;

pub use subscriber::Subscription;

/// Shared handle on the index and its subscribers. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Mutex<Shared>>,
    instance_id: Arc<str>,
    connected: Arc<AtomicBool>,
    queue: usize,
    metrics: Metrics,
    clock: fn() -> i64,
    /// A snapshot or a rebuild is a copy of the whole index: its memory is given back after.
    release: Release,
    /// How many entries the index lost ([`Publisher::removals`]).
    removals: Arc<AtomicU64>,
    /// True once the index has been rebuilt from the runtime: before, it lists only what the
    /// relay happened to see, and a subscriber must not take it for the node's whole set.
    complete: Arc<watch::Sender<bool>>,
}

/// The capabilities this shim advertises in every snapshot (`Snapshot.capabilities`; names in
/// `podward_api::wire`).
pub const CAPABILITIES: &[&str] = &[
    podward_api::wire::SHIM_SNAPSHOT_COMPLETE,
    podward_api::wire::SHIM_STOP_REQUESTED,
];

struct Shared {
    index: Index,
    seq: u64,
    subscribers: Vec<Slot>,
}

struct Slot {
    /// Events shared by every subscriber's queue: one allocation each, however many subscribe.
    tx: mpsc::Sender<Arc<WatchEvent>>,
    /// Set when the queue overflowed: the subscriber is owed a snapshot, not events.
    resync: Arc<AtomicBool>,
}

impl Publisher {
    /// A publisher with an empty index; `queue` is the per-subscriber queue length and `clock`
    /// gives Unix nanoseconds (injectable for tests).
    pub fn new(queue: usize, metrics: Metrics, clock: fn() -> i64) -> Self {
        let instance_id = format!("{:016x}", rand::random::<u64>());
        Self {
            shared: Arc::new(Mutex::new(Shared {
                index: Index::new(),
                seq: 0,
                subscribers: Vec::new(),
            })),
            instance_id: instance_id.into(),
            connected: Arc::new(AtomicBool::new(false)),
            queue: queue.max(1),
            metrics,
            clock,
            release: Release::default(),
            removals: Arc::default(),
            complete: Arc::new(watch::channel(false).0),
        }
    }

    /// Whether the index has been rebuilt from the runtime since this shim started.
    pub fn is_complete(&self) -> bool {
        *self.complete.borrow()
    }

    /// Resolves once the index has been rebuilt from the runtime (at once if it has been).
    pub async fn until_complete(&self) {
        let mut rx = self.complete.subscribe();
        // The sender lives as long as `self`, so the wait only ends when the flag is set.
        let _ = rx.wait_for(|c| *c).await;
    }

    /// A count of the entries removed from the index, bumped as each removal is published: the
    /// relay's repeat digests are forgotten when it moves (`observe/unchanged.rs`).
    pub fn removals(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.removals)
    }

    /// Records whether containerd is reachable (reported in snapshots).
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    /// The random ID of this shim instance.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Folds `obs` into the index and publishes the resulting changes. Never blocks on a
    /// subscriber.
    pub fn apply(&self, obs: Observation) {
        let now = (self.clock)();
        let rebuilt = matches!(
            obs,
            Observation::Rebuilt { .. } | Observation::Relisted { .. }
        );
        let whole = matches!(obs, Observation::Rebuilt { .. });
        let mut guard = self.shared.lock();
        let shared = &mut *guard;
        let changes = shared.index.apply(obs);
        for change in changes {
            if is_removal(&change) {
                self.removals.fetch_add(1, Ordering::Relaxed);
            }
            shared.seq += 1;
            let event = Arc::new(to_event(shared.seq, now, change));
            if is_undelivered(&event) {
                self.metrics.undelivered.inc();
            }
            shared.subscribers.retain(|s| {
                if s.resync.load(Ordering::Relaxed) {
                    return !s.tx.is_closed();
                }
                match s.tx.try_send(Arc::clone(&event)) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        s.resync.store(true, Ordering::Relaxed);
                        true
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            });
        }
        self.metrics
            .index_sandboxes
            .set(i64::try_from(shared.index.sandbox_count()).unwrap_or(i64::MAX));
        self.metrics
            .index_containers
            .set(i64::try_from(shared.index.container_count()).unwrap_or(i64::MAX));
        drop(guard);
        if whole {
            self.complete.send_replace(true);
        }
        if rebuilt {
            self.release.soon();
        }
    }

    /// Folds the calls the previous shim left undelivered into the index, before its rebuild
    /// (which then marks their sandboxes and containers undelivered again).
    pub fn carry_in(&self, calls: Vec<crate::carry::Carried>) {
        crate::carry::into_index(&mut self.shared.lock().index, calls);
    }

    /// Reads the index under its lock (keep `f` short: the relay's decoder waits on it).
    pub fn with_index<R>(&self, f: impl FnOnce(&Index) -> R) -> R {
        f(&self.shared.lock().index)
    }

    /// The whole index now.
    pub fn snapshot(&self) -> Snapshot {
        let shared = self.shared.lock();
        self.snapshot_locked(&shared, false)
    }

    fn snapshot_locked(&self, shared: &Shared, resync: bool) -> Snapshot {
        self.release.soon();
        let mut snap = shared.index.snapshot(
            shared.seq,
            &self.instance_id,
            self.connected.load(Ordering::Relaxed),
            resync,
            (self.clock)(),
        );
        snap.complete = self.is_complete();
        snap.server_version = env!("CARGO_PKG_VERSION").to_owned();
        snap.capabilities = CAPABILITIES.iter().map(|c| (*c).to_owned()).collect();
        snap
    }

    /// A new subscriber unless `max` are already connected (the error is that count). Each
    /// subscriber may hold a whole snapshot in its connection's buffers while it reads, so their
    /// number is what bounds the memory they cost.
    pub fn try_subscribe(&self, max: usize) -> Result<Subscription, usize> {
        let connected = usize::try_from(self.metrics.subscribers.get()).unwrap_or(0);
        if connected >= max {
            return Err(connected);
        }
        Ok(self.subscribe())
    }

    /// A new subscriber: its stream starts with a snapshot, then every change in order.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(self.queue);
        let resync = Arc::new(AtomicBool::new(false));
        let first = {
            let mut shared = self.shared.lock();
            let snap = self.snapshot_locked(&shared, false);
            shared.subscribers.push(Slot {
                tx,
                resync: resync.clone(),
            });
            snapshot_event(snap, (self.clock)())
        };
        let publisher = self.clone();
        Subscription::new(
            self.metrics.subscribers.clone(),
            first,
            rx,
            resync,
            move |flag| publisher.resync_snapshot(flag),
        )
    }

    /// The snapshot owed to a subscriber that overflowed, taken under the lock so that the
    /// events after it continue exactly at its `seq`.
    fn resync_snapshot(&self, flag: &AtomicBool) -> WatchEvent {
        let shared = self.shared.lock();
        flag.store(false, Ordering::Relaxed);
        self.metrics.resyncs.inc();
        let snap = self.snapshot_locked(&shared, true);
        snapshot_event(snap, (self.clock)())
    }
}

fn snapshot_event(snap: Snapshot, now: i64) -> WatchEvent {
    WatchEvent {
        seq: snap.seq,
        observed_at_ns: now,
        event: Some(watch_event::Event::Snapshot(snap)),
    }
}

fn to_event(seq: u64, now: i64, change: Change) -> WatchEvent {
    let event = match change {
        Change::Sandbox(kind, sandbox) => watch_event::Event::Sandbox(SandboxEvent {
            kind: kind as i32,
            sandbox: Some(sandbox),
        }),
        Change::Container(kind, container) => watch_event::Event::Container(ContainerEvent {
            kind: kind as i32,
            container: Some(container),
        }),
    };
    WatchEvent {
        seq,
        observed_at_ns: now,
        event: Some(event),
    }
}

/// Whether the change removes an entry.
fn is_removal(c: &Change) -> bool {
    match c {
        Change::Sandbox(k, _) => *k == SandboxEventKind::SandboxEventRemoved,
        Change::Container(k, _) => *k == ContainerEventKind::ContainerEventRemoved,
    }
}

fn is_undelivered(e: &WatchEvent) -> bool {
    match &e.event {
        Some(watch_event::Event::Sandbox(s)) => {
            s.kind == SandboxEventKind::SandboxEventUndelivered as i32
        }
        Some(watch_event::Event::Container(c)) => {
            c.kind == ContainerEventKind::ContainerEventUndelivered as i32
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
