//! What the manager holds of a running worker: its key, its control handle (stop, trigger) and
//! a reader of the status it publishes ([`PublishedStatus`]). The worker task owns everything
//! else, the writing end of its status included ([`StatusPublisher`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::model::outcome::ProbeResult;
use crate::spec::{ProbeSpec, ProbeType, StartupGating};

/// Identity of a worker.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerKey {
    /// Pod UID.
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// Probe type.
    pub ty: ProbeType,
}

/// Control handle of a running worker.
#[derive(Debug, Default)]
pub struct WorkerCtl {
    stop: AtomicBool,
    trigger: AtomicBool,
    wake: Notify,
    update: Mutex<Option<SpecUpdate>>,
}

/// A new spec for a running worker: the pod's `podward.io/probes` annotation was edited (the
/// API's copy is mutable). The worker keeps its container and published result, restarts its
/// threshold count and, if the period changed, its ticker.
#[derive(Debug, Clone)]
pub struct SpecUpdate {
    /// The probe's new spec.
    pub spec: Arc<ProbeSpec>,
    /// Whether the container's startup probe now gates its liveness and readiness.
    pub startup: StartupGating,
}

impl WorkerCtl {
    /// Asks the worker to stop (idempotent; an in-flight probe finishes first, as in kubelet).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Requests one immediate probe and a ticker reset (non-blocking; extra requests coalesce,
    /// like kubelet's 1-slot `manualTriggerCh`).
    pub fn trigger(&self) {
        self.trigger.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Hands the worker a new spec, applied before its next probe (which it runs at once).
    pub fn update(&self, update: SpecUpdate) {
        *self.update.lock() = Some(update);
        self.wake.notify_one();
    }

    /// The pending spec update, if any; clears it.
    pub(crate) fn take_update(&self) -> Option<SpecUpdate> {
        self.update.lock().take()
    }

    /// Whether stop was requested.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Resolves when [`WorkerCtl::stop`] or [`WorkerCtl::trigger`] is called (a call made while
    /// nobody waits is kept for the next wait).
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// Whether a trigger is pending; clears it.
    pub(crate) fn take_trigger(&self) -> bool {
        self.trigger.swap(false, Ordering::AcqRel)
    }
}

/// A worker's state as `Status` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The container instance probed.
    pub container_id: String,
    /// The published result for that instance.
    pub result: Option<ProbeResult>,
    /// The last probe's own result, before thresholds.
    pub last_probe_result: Option<ProbeResult>,
    /// The last probe's output (capped at `model::outcome::MAX_OUTPUT_BYTES`).
    pub last_output: String,
    /// Consecutive successes so far.
    pub consecutive_successes: u32,
    /// Consecutive failures so far.
    pub consecutive_failures: u32,
    /// When the last probe ran (Unix ns).
    pub last_probe_at_ns: i64,
    /// When the published result last changed (Unix ns).
    pub last_transition_at_ns: i64,
    /// Verdict reached; no probes until the container ID changes.
    pub on_hold: bool,
    /// Probes run by this worker.
    pub probes_run: u64,
    /// Why the last probe errored (no answer after three attempts; discarded), empty once a
    /// probe answers again.
    pub last_error: String,
    /// When a probe last errored (Unix ns, 0 = never).
    pub last_error_at_ns: i64,
    /// Probes of this worker that errored.
    pub probes_errored: u64,
    /// Errored probes in a row, since a probe last answered.
    pub consecutive_errors: u32,
    /// Whether this worker's own probes reached a threshold for this instance; an
    /// initial value is none (the readiness gate keeps the API's condition until one).
    pub reached_threshold: bool,
}

/// The worker's end of its status: the only writer, owned by the worker task and not cloneable,
/// so what `Status` shows is what the worker published.
#[derive(Debug, Default)]
pub struct StatusPublisher(Arc<Mutex<WorkerStatus>>);

impl StatusPublisher {
    /// Publishes a change: `f` edits the status in place (readers see all of it or none).
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut WorkerStatus) -> R) -> R {
        f(&mut self.0.lock())
    }

    /// A reader of what this worker publishes.
    pub fn reader(&self) -> PublishedStatus {
        PublishedStatus(self.0.clone())
    }
}

/// A reader of a worker's published status (the pod table keeps one per worker). It can only
/// read: a plain shared cell rather than a channel, since nobody waits on a change and a
/// channel's wakers would weigh on each of the node's many workers.
#[derive(Clone, Debug)]
pub struct PublishedStatus(Arc<Mutex<WorkerStatus>>);

impl PublishedStatus {
    /// `f` on the status as last published.
    pub fn read<R>(&self, f: impl FnOnce(&WorkerStatus) -> R) -> R {
        f(&self.0.lock())
    }

    /// A copy of the status as last published.
    pub fn get(&self) -> WorkerStatus {
        self.read(WorkerStatus::clone)
    }
}
