//! What the gate keeps between writes: the gated pods with the condition the API has for each,
//! the queue of pods to look at, and the writes planned from them.

use std::collections::{HashMap, HashSet, VecDeque};

use podward_api::backoff::Backoff;
use tokio::time::Instant;

use super::write::Target;
use crate::model::api_pod::GateCondition;

/// Queued pods looked at per pass of the writer (their readiness asked, outside the lock).
pub(super) const LOOK: usize = 256;

/// Everything the gate keeps, under its one lock.
#[derive(Default)]
pub(super) struct State {
    /// Gated pods by UID.
    pub(super) pods: HashMap<String, GatePod>,
    /// Pods to look at, in order (each once).
    pub(super) queue: VecDeque<String>,
    /// The pods in `queue`.
    pub(super) queued: HashSet<String>,
    /// Pods with a write in flight.
    pub(super) in_flight: HashSet<String>,
}

impl State {
    /// Queues pod `uid` to be looked at (once, however often it is marked).
    pub(super) fn mark(&mut self, uid: &str) {
        if self.queued.insert(uid.to_owned()) {
            self.queue.push_back(uid.to_owned());
        }
    }

    /// Queues pod `uid` at the front, to be looked at first (unless it is queued already).
    pub(super) fn mark_first(&mut self, uid: String) {
        if self.queued.insert(uid.clone()) {
            self.queue.push_front(uid);
        }
    }

    /// Takes up to [`LOOK`] queued pods to look at now, marking them in flight: pods with a
    /// write in flight or in backoff stay queued (the earliest backoff's end goes into
    /// `next_due`), pods no longer gated leave the queue.
    pub(super) fn take_batch(
        &mut self,
        now: Instant,
        next_due: &mut Option<Instant>,
    ) -> Vec<String> {
        let mut batch = Vec::new();
        let mut skipped = VecDeque::new();
        while batch.len() < LOOK {
            let Some(uid) = self.queue.pop_front() else {
                break;
            };
            if self.in_flight.contains(&uid) {
                skipped.push_back(uid);
                continue;
            }
            let Some(pod) = self.pods.get(&uid) else {
                self.queued.remove(&uid);
                continue;
            };
            if let Some(t) = pod.not_before.filter(|t| *t > now) {
                *next_due = Some(next_due.map_or(t, |n| n.min(t)));
                skipped.push_back(uid);
                continue;
            }
            self.queued.remove(&uid);
            self.in_flight.insert(uid.clone());
            batch.push(uid);
        }
        skipped.append(&mut self.queue);
        self.queue = skipped;
        batch
    }
}

/// What the gate keeps of one gated pod.
pub(super) struct GatePod {
    pub(super) target: Target,
    /// The condition as the API has it: the reflector's view, or the prober's own write when
    /// that is newer.
    pub(super) current: Option<GateCondition>,
    /// Which container `current` is about: the one the gate wrote about, while the API's
    /// condition is the gate's own write.
    pub(super) about: About,
    /// Resource version the prober's last write produced: reflector views older than that are
    /// stale and do not replace `current`.
    pub(super) written_rv: Option<u64>,
    /// Failed writes in a row.
    pub(super) failures: u32,
    /// The retry schedule after failed writes (reset by a success).
    pub(super) backoff: Backoff,
    /// Not before this instant (backoff, throttling).
    pub(super) not_before: Option<Instant>,
}

/// One planned write.
pub(super) struct Planned {
    pub(super) uid: String,
    pub(super) target: Target,
    /// The container the condition is about ("" for a pod-wide one).
    pub(super) about: String,
    pub(super) condition: GateCondition,
}

/// Which container the condition the API has is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum About {
    /// The gate wrote that condition, about this container ("" for a pod-wide one).
    Written(String),
    /// The condition came from elsewhere: a write of an earlier prober (before a restart) or
    /// anyone else's.
    #[default]
    Found,
}

impl About {
    /// Whether condition `c` is about `container`. A condition the gate did not write names its
    /// container only in its message, which starts with `container <name>` as the view words it
    /// ([`PodReadiness::NotReady`]'s message).
    pub(super) fn names(&self, c: &GateCondition, container: &str) -> bool {
        match self {
            About::Written(about) => about == container,
            About::Found => c
                .message
                .strip_prefix("container ")
                .and_then(|m| m.strip_prefix(container))
                .is_some_and(|rest| rest.starts_with([':', ' '])),
        }
    }
}
