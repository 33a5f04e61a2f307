//! The whole kill: when a liveness or startup probe fails at threshold on a running container,
//! [`Killer::kill`] stops it once per container ID, with the grace period kubelet would use,
//! and logs, counts, records (for `Status`) and publishes (an [`Event`]) what it did. kubelet then
//! restarts the container by its restart policy.
//!
//! Workers only decide that a kill is due; the manager only forwards that decision here.
//!
//! The `podward_prober_kills_total` series of a pod go when the pod goes ([`Killer::forget_pod`]),
//! as kubelet's worker deletes its probe series when it stops: a node's series then follow its
//! pods rather than grow with every pod it ever ran.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::event::{Event, Events, Kill, killing_message};
use crate::handler::output::capped;
use crate::metrics::Metrics;
use crate::model::{ContainerInfo, PodInfo};
use crate::spec::{ProbeSpec, ProbeType};
use crate::stopper::Stopper;

/// kubelet's `minimumGracePeriodInSeconds`: a kill never gets less than this.
pub const MIN_GRACE_SECONDS: i64 = 2;

/// The pod grace kubelet defaults to when the annotation is missing.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Grace period for a probe-triggered kill, as kubelet's `setTerminationGracePeriod`: the
/// probe-level `terminationGracePeriodSeconds`, else the pod's, never below 2 s.
pub fn grace_seconds(spec: &ProbeSpec, pod_grace: Option<i64>) -> i64 {
    spec.termination_grace_period_seconds
        .or(pod_grace)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(MIN_GRACE_SECONDS)
}

/// The kills of one container (by name) of a pod, as `Status` shows them.
#[derive(Debug, Default, Clone)]
pub struct KillLog {
    /// Kills so far.
    pub count: u32,
    /// The latest.
    pub last: Option<Kill>,
}

/// The labels of one `podward_prober_kills_total` series: probe type, container, pod, namespace.
type KillSeries = [String; 4];

/// The kill path. Cheap to clone.
#[derive(Clone)]
pub struct Killer {
    inner: Arc<Inner>,
}

struct Inner {
    stopper: Arc<dyn Stopper>,
    metrics: Arc<Metrics>,
    events: Events,
    clock: Clock,
    /// Container IDs already killed (never twice), with their pod UID: an entry also means
    /// "the pod is still followed" when a stop returns.
    killed: Mutex<HashMap<String, String>>,
    /// Kills per (pod UID, container name).
    log: Mutex<HashMap<(String, String), KillLog>>,
    /// The kill series each pod UID has counted in. The series has no UID label, so a pod
    /// re-created under the same name (a StatefulSet's) shares it: it goes with the last.
    series: Mutex<HashMap<String, HashSet<KillSeries>>>,
}

impl Killer {
    /// Kills through `stopper`, counting in `metrics` and publishing to `events`.
    pub fn new(
        stopper: Arc<dyn Stopper>,
        metrics: Arc<Metrics>,
        events: Events,
        clock: Clock,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                stopper,
                metrics,
                events,
                clock,
                killed: Mutex::new(HashMap::new()),
                log: Mutex::new(HashMap::new()),
                series: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The `ty` probe of container `c` failed at threshold with `output`: stop the container,
    /// unless this instance was killed already. Returns at once; the stop (up to the grace
    /// period) runs in its own task, and is recorded and published when it returns.
    pub fn kill(
        &self,
        pod: &PodInfo,
        c: &ContainerInfo,
        ty: ProbeType,
        spec: &ProbeSpec,
        output: &str,
    ) {
        let inner = &self.inner;
        if inner
            .killed
            .lock()
            .insert(c.id.to_string(), pod.uid.clone())
            .is_some()
        {
            return; // never kill the same instance twice
        }
        let grace = grace_seconds(spec, c.pod_grace_seconds);
        let message = killing_message(&c.name, ty);
        tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
            container_id = %c.id, probe = ty.name(), grace_seconds = grace, output = %output,
            "{message}");
        let labels: KillSeries = [
            ty.name().to_owned(),
            c.name.clone(),
            pod.name.clone(),
            pod.namespace.clone(),
        ];
        inner.metrics.kills.with_label_values(&labels).inc();
        inner
            .series
            .lock()
            .entry(pod.uid.clone())
            .or_default()
            .insert(labels);
        let inner = self.inner.clone();
        let pod = pod.clone();
        let c = c.clone();
        let output = capped(output).to_owned();
        tokio::spawn(async move {
            // The record carries when the kill was issued; it is published once StopContainer
            // returns (after up to `grace` seconds), with its error if any.
            let issued_at_ns = inner.clock.now_ns();
            let res = inner.stopper.stop_container(c.id.to_string(), grace).await;
            if let Err(e) = &res {
                tracing::error!(pod = %pod.name, container = %c.name, container_id = %c.id,
                    error = %e, "cannot stop the container");
            }
            let kill = Kill {
                container_id: c.id.to_string(),
                probe: ty,
                message,
                output,
                grace_seconds: grace,
                issued_at_ns,
                error: res.err(),
            };
            // Record only while the pod is still followed (a late kill must not resurrect it).
            if inner.killed.lock().contains_key(&*c.id) {
                let mut log = inner.log.lock();
                let entry = log.entry((pod.uid.clone(), c.name.clone())).or_default();
                entry.count += 1;
                entry.last = Some(kill.clone());
            }
            inner.events.publish(Event::kill(&pod, &c, kill));
        });
    }

    /// The kills of container `name` of pod `uid`.
    pub fn log(&self, uid: &str, name: &str) -> KillLog {
        self.inner
            .log
            .lock()
            .get(&(uid.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Forgets pod `uid` (it is no longer followed): its kills, the instances killed, and its
    /// `podward_prober_kills_total` series unless a followed pod of the same name counts in them.
    pub fn forget_pod(&self, uid: &str) {
        self.inner.killed.lock().retain(|_, u| u != uid);
        self.inner.log.lock().retain(|(u, _), _| u != uid);
        let mut series = self.inner.series.lock();
        let Some(gone) = series.remove(uid) else {
            return;
        };
        for labels in gone {
            if !series.values().any(|other| other.contains(&labels)) {
                let _ = self.inner.metrics.kills.remove_label_values(&labels);
            }
        }
    }
}
