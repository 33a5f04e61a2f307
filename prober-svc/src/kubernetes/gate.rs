//! The readiness gate: for pods that list `readinessGates: [{conditionType: podward.io/ready}]`
//! (the type is `--readiness-gate-condition`), the prober owns that pod condition and keeps it
//! equal to what it knows of the pod's readiness ([`PodReadiness`], from the [`View`]).
//!
//! - Written to `pods/status` by server-side apply with field manager `podward-prober`: only
//!   this one condition (the conditions list is a map keyed by `type`), never kubelet's, with the
//!   pod's UID as a precondition (a pod re-created under the same name is another pod).
//!   `lastTransitionTime` moves only when `status` does.
//! - Coalesced per pod: a change marks the pod; when its turn comes the *latest* readiness is
//!   compared with the condition the API has (status, reason, and which container it is about:
//!   the one the gate wrote about, or for a condition the gate did not write, the one its message
//!   names), and written only if they differ. So a steady node writes nothing (a failing probe
//!   whose output changes at every run included), and a pod that flips twice before its write
//!   costs one write or none.
//! - Rate-limited process-wide by the client's token bucket (`--kube-api-qps`/`--kube-api-burst`),
//!   at most [`MAX_IN_FLIGHT`] writes at once, never two for one pod; failures are retried per
//!   pod with backoff (`409` soon, `429` after the server's `retryAfterSeconds`), a `404` drops
//!   the write (the pod is gone), and so does a `422` refusing the `metadata.uid` (the API
//!   server's answer when another pod now has the name: the uid is immutable); any other `422`
//!   is not retried either (the same write would be refused again).
//! - Restart-safe: what the prober has not established since it started is
//!   [`PodReadiness::Unknown`], and the condition the API has is kept. A prober restart changes
//!   nothing a Service can see, in either direction, until a real probe result differs.
//! - With the API unreachable, writes wait (and keep being coalesced); probing never does.
//! - The sentinel's `False` (reason `ProberNotReporting`) is not overwritten while this
//!   prober's node lease is not current ([`Gate::set_vouch`]): the prober takes its pods back
//!   only once it vouches for its node again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::backoff::Backoff;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::desired::{Wanted, desired, plan};
use self::finish::{Outcome, Written};
use self::state::{About, GatePod, Planned, State};
pub use self::write::{ConditionWriter, FIELD_MANAGER, KubeWriter, Target, WriteError, apply_body};
use super::metrics::ApiMetrics;
use crate::clock::Clock;
use crate::kubernetes::vouch::Vouch;
use crate::model::api_pod::ApiPod;
use crate::pods::view::View;
use crate::pods::view::readiness::PodReadiness;
use crate::publish::event::{Event, EventKind, EventSink};
use crate::spec::ProbeType;

mod desired;
mod finish;
mod hold;
mod state;
mod write;

/// Condition writes in flight at once (each for a different pod).
pub const MAX_IN_FLIGHT: usize = 8;

/// First retry delay after a failed write; doubles per failure up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// Longest retry delay after failed writes.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Jitter of each retry delay (±20 %), so that pods that failed together do not retry together.
const RETRY_JITTER: f64 = 0.2;

/// Where the gate reads a pod's readiness (the prober's [`View`]; tests script it).
pub trait ReadinessSource: Send + Sync + 'static {
    /// Pod `uid`'s readiness.
    fn readiness(&self, uid: &str) -> PodReadiness;
}

impl ReadinessSource for View {
    fn readiness(&self, uid: &str) -> PodReadiness {
        View::readiness(self, uid)
    }
}

/// The readiness gate. Cheap to clone; one [`Gate::run`] task writes.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    condition_type: String,
    /// This prober's node lease, when it keeps one: while it is not current, the sentinel's
    /// `False` is left as it is.
    vouch: std::sync::OnceLock<Vouch>,
    state: Mutex<State>,
    wake: Notify,
    metrics: ApiMetrics,
}

/// The writes in flight, with the pod each is for (to clean up after a panicked task).
#[derive(Default)]
struct Tasks {
    set: JoinSet<(String, Outcome)>,
    ids: HashMap<tokio::task::Id, String>,
}

impl Gate {
    /// A gate for condition type `condition_type`, counting in `metrics`.
    pub fn new(condition_type: &str, metrics: ApiMetrics) -> Self {
        Self {
            inner: Arc::new(Inner {
                condition_type: condition_type.to_owned(),
                vouch: std::sync::OnceLock::new(),
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                metrics,
            }),
        }
    }

    /// The condition type the gate owns.
    pub fn condition_type(&self) -> &str {
        &self.inner.condition_type
    }

    /// The reflector's view of a pod: follow it if it is gated, and look at it again.
    pub fn api_pod(&self, pod: &ApiPod) {
        let mut st = self.inner.state.lock();
        if !pod.gated {
            let gone = st.pods.remove(&pod.uid);
            self.forget(gone.as_ref());
            return;
        }
        let target = Target {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let entry = st.pods.entry(pod.uid.clone()).or_insert_with(|| GatePod {
            target: target.clone(),
            current: None,
            about: About::Found,
            written_rv: None,
            failures: 0,
            backoff: retry_backoff(),
            not_before: None,
        });
        entry.target = target;
        let rv = pod.resource_version.parse::<u64>().ok();
        let stale = matches!((rv, entry.written_rv), (Some(r), Some(w)) if r < w);
        if !stale {
            // Another condition than the gate's own write: who wrote it is not known.
            if pod.condition != entry.current {
                entry.about = About::Found;
            }
            entry.current = pod.condition.clone();
        }
        st.mark(&pod.uid);
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Pod `uid` is gone from the API's view.
    pub fn api_gone(&self, uid: &str) {
        let gone = self.inner.state.lock().pods.remove(uid);
        self.forget(gone.as_ref());
    }

    /// A pod no longer followed: out of the failing count if it was in it.
    fn forget(&self, gone: Option<&GatePod>) {
        if gone.is_some_and(|p| p.failures > 0) {
            self.inner.metrics.gate_failing.dec();
        }
    }

    /// Looks at pod `uid` again (its readiness may have changed).
    pub fn touch(&self, uid: &str) {
        let mut st = self.inner.state.lock();
        if st.pods.contains_key(uid) {
            st.mark(uid);
            drop(st);
            self.inner.wake.notify_one();
        }
    }

    /// Writes conditions until `shutdown` resolves: `source` says what each pod's readiness is,
    /// `writer` writes, `clock` dates transitions.
    pub async fn run(
        self,
        writer: Arc<dyn ConditionWriter>,
        source: Arc<dyn ReadinessSource>,
        clock: Clock,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut tasks = Tasks::default();
        let mut renewals = self.inner.vouch.get().map(Vouch::renewals);
        loop {
            let next_due = self.dispatch(&mut tasks, &writer, &*source, &clock);
            tokio::select! {
                () = &mut shutdown => return,
                () = self.inner.wake.notified() => {}
                changed = hold::renewed(renewals.as_mut()) => {
                    if changed {
                        self.touch_marked();
                    } else {
                        renewals = None;
                    }
                }
                Some(done) = tasks.set.join_next_with_id(), if !tasks.set.is_empty() => match done {
                    Ok((id, (uid, outcome))) => {
                        tasks.ids.remove(&id);
                        self.finish(&uid, outcome);
                    }
                    Err(e) => {
                        // A write task panicked: count it as a failed write, retried later.
                        if let Some(uid) = tasks.ids.remove(&e.id()) {
                            self.finish(&uid, Err(WriteError::Failed(e.to_string())));
                        }
                    }
                },
                () = sleep_until(next_due), if next_due.is_some() => {}
            }
        }
    }

    /// Starts the writes that are due; returns when the next pod in backoff becomes due.
    ///
    /// Looks at queued pods in passes of at most [`LOOK`](state::LOOK) until the queue is drained or
    /// [`MAX_IN_FLIGHT`] writes are in flight: pods whose condition is already right cost no
    /// slot, so a node where every pod was touched (a relist, a restart) is looked through at
    /// once and a real change behind them is not kept waiting.
    fn dispatch(
        &self,
        tasks: &mut Tasks,
        writer: &Arc<dyn ConditionWriter>,
        source: &dyn ReadinessSource,
        clock: &Clock,
    ) -> Option<Instant> {
        let now = Instant::now();
        let mut next_due: Option<Instant> = None;
        while tasks.set.len() < MAX_IN_FLIGHT {
            // Pick the pods to look at (under the lock), then ask the view (outside it).
            let batch = self.inner.state.lock().take_batch(now, &mut next_due);
            if batch.is_empty() {
                break;
            }
            let plans: Vec<(String, Option<Wanted>)> = batch
                .into_iter()
                .map(|uid| {
                    let want = desired(source.readiness(&uid));
                    (uid, want)
                })
                .collect();
            self.start_writes(tasks, writer, clock, plans);
        }
        let st = self.inner.state.lock();
        self.inner
            .metrics
            .gate_pending
            .set(i64::try_from(st.queued.len() + st.in_flight.len()).unwrap_or(i64::MAX));
        next_due
    }

    /// Starts a write for each pod of `plans` whose condition differs from what it wants, while
    /// slots are free; the pods left without a slot go back to the front of the queue.
    fn start_writes(
        &self,
        tasks: &mut Tasks,
        writer: &Arc<dyn ConditionWriter>,
        clock: &Clock,
        plans: Vec<(String, Option<Wanted>)>,
    ) {
        let mut st = self.inner.state.lock();
        let mut requeue = Vec::new();
        for (uid, want) in plans {
            let planned = match (want, st.pods.get(&uid)) {
                // The sentinel's False stays until this prober vouches for its node again (a
                // renewal looks at the pod again).
                (Some(_), Some(pod))
                    if hold::held(self.inner.vouch.get(), pod.current.as_ref()) =>
                {
                    None
                }
                (Some(want), Some(pod)) => plan(&uid, pod, want, clock),
                _ => None,
            };
            match planned {
                None => {
                    st.in_flight.remove(&uid);
                }
                // No slot left: back to the front of the queue, looked at again first.
                Some(_) if tasks.set.len() >= MAX_IN_FLIGHT => {
                    st.in_flight.remove(&uid);
                    requeue.push(uid);
                }
                Some(p) => self.spawn_write(tasks, writer, p),
            }
        }
        for uid in requeue.into_iter().rev() {
            st.mark_first(uid);
        }
    }

    /// Holds writes over the sentinel's `False` (reason
    /// [`SENTINEL_REASON`](crate::kubernetes::names::SENTINEL_REASON)) while `vouch` is not
    /// current (the node lease not renewed within its duration), and looks at those pods again at
    /// each renewal. Set once, before [`Gate::run`].
    pub fn set_vouch(&self, vouch: Vouch) {
        let _ = self.inner.vouch.set(vouch);
    }

    /// Looks again at every pod the sentinel marked (the node lease was renewed).
    fn touch_marked(&self) {
        let mut st = self.inner.state.lock();
        let marked = hold::marked(&st);
        if marked.is_empty() {
            return;
        }
        for uid in &marked {
            st.mark(uid);
        }
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Records the outcome of a write to pod `uid` (what was written, or why not), and wakes the
    /// writer for a retry or the next write.
    fn finish(&self, uid: &str, result: Outcome) {
        let mut st = self.inner.state.lock();
        finish::record(
            &mut st,
            &self.inner.metrics,
            &self.inner.condition_type,
            uid,
            result,
        );
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Starts the planned write `p` as a task of `tasks`.
    fn spawn_write(&self, tasks: &mut Tasks, writer: &Arc<dyn ConditionWriter>, p: Planned) {
        let Planned {
            uid,
            target,
            about,
            condition,
        } = p;
        let ty = self.inner.condition_type.clone();
        let w = writer.clone();
        let key = uid.clone();
        let handle = tasks.set.spawn(async move {
            let outcome = w
                .write(&ty, &target, &condition)
                .await
                .map(|resource_version| Written {
                    condition,
                    about,
                    resource_version,
                });
            (uid, outcome)
        });
        tasks.ids.insert(handle.id(), key);
    }
}

impl EventSink for Gate {
    fn publish(&self, event: &Event) {
        let result = matches!(event.kind, EventKind::Result { .. })
            && matches!(event.probe, ProbeType::Readiness | ProbeType::Startup);
        // An invalid annotation holds a gated pod not ready with no probe result to tell it.
        let invalid = matches!(event.kind, EventKind::AnnotationWarning { reason, .. }
            if reason == crate::publish::event::REASON_PROBE_SPEC_INVALID);
        if result || invalid {
            self.touch(&event.pod_uid);
        }
    }
}

/// The retry schedule of one pod's writes: doubling from [`FIRST_RETRY`] up to [`MAX_RETRY`],
/// with [`RETRY_JITTER`].
fn retry_backoff() -> Backoff {
    Backoff::new(FIRST_RETRY, MAX_RETRY, RETRY_JITTER)
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
