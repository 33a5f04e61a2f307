//! The whole kill: when a liveness or startup probe fails at threshold on a running container,
//! [`Killer::kill`] stops it once per container ID, with the grace period kubelet would use,
//! and logs, counts, records (for `Status`) and publishes (an [`Event`]) what it did. kubelet then
//! restarts the container by its restart policy.
//!
//! In kubelet's order (`killContainer`): the `Killing` event (kubelet's text by restart policy
//! and container kind), then the container's preStop hook when the pod spec has one and the
//! grace is above 0 (`crate::consequences::prestop`; bounded by the grace period), then
//! `StopContainer` with the grace that is left, never below 2 s. A pod being deleted gives its
//! `deletionGracePeriodSeconds`, as kubelet's `setTerminationGracePeriod`. A `Never` pod with no
//! other regular container running is one kubelet would kill whole
//! ([`crate::publish::event::kills_pod`]): the pod's grace then, not the probe's.
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
use crate::consequences::prestop::{HookRan, HookRunner, grace_after_hook};
use crate::metrics::Metrics;
use crate::model::{ContainerInfo, PodInfo};
use crate::publish::event::{Event, Events, Kill, killing_message_for, kills_pod};
use crate::spec::{ProbeSpec, ProbeType};
use crate::stopper::Stopper;

/// kubelet's `minimumGracePeriodInSeconds`: a kill never gets less than this.
pub const MIN_GRACE_SECONDS: i64 = 2;

/// The pod grace kubelet defaults to when the annotation is missing.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Grace period for a probe-triggered kill, as kubelet's `setTerminationGracePeriod`: a pod
/// being deleted has its `deletionGracePeriodSeconds`; else the probe-level
/// `terminationGracePeriodSeconds`, else the pod's. Before kubelet's 2 s minimum, which
/// `killContainer` applies only after deciding on the preStop hook (a grace of 0 runs none).
pub fn kill_grace(spec: &ProbeSpec, pod_grace: Option<i64>, deletion_grace: Option<i64>) -> i64 {
    deletion_grace
        .or(spec.termination_grace_period_seconds)
        .or(pod_grace)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
}

/// The grace `StopContainer` gets without a hook: [`kill_grace`], never below 2 s.
pub fn grace_seconds(spec: &ProbeSpec, pod_grace: Option<i64>) -> i64 {
    kill_grace(spec, pod_grace, None).max(MIN_GRACE_SECONDS)
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
    /// Runs preStop hooks; `None` skips them (tests of the plain stop).
    hooks: Option<Arc<dyn HookRunner>>,
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
    /// Kills through `stopper` after running preStop hooks through `hooks`, counting in
    /// `metrics` and publishing to `events`.
    pub fn new(
        stopper: Arc<dyn Stopper>,
        hooks: Option<Arc<dyn HookRunner>>,
        metrics: Arc<Metrics>,
        events: Events,
        clock: Clock,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                stopper,
                hooks,
                metrics,
                events,
                clock,
                killed: Mutex::new(HashMap::new()),
                log: Mutex::new(HashMap::new()),
                series: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The `ty` probe of container `c` failed at threshold with `output` (capped, as the worker
    /// keeps it): stop the container,
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
        let pod_grace = c
            .pod_grace_seconds
            .or_else(|| pod.api.as_ref().and_then(|a| a.grace_seconds));
        let deletion_grace = pod.api.as_ref().and_then(|a| a.deletion_grace_seconds);
        // A kill kubelet would make a pod kill has no probe reason: the pod's grace.
        let grace = if kills_pod(pod, &c.name) {
            deletion_grace
                .or(pod_grace)
                .unwrap_or(DEFAULT_GRACE_SECONDS)
        } else {
            kill_grace(spec, pod_grace, deletion_grace)
        };
        let message = killing_message_for(pod, &c.name, ty);
        tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
            container_id = %c.id, probe = ty.name(), grace_seconds = grace.max(MIN_GRACE_SECONDS),
            output = %output, "{message}");
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
        let output = output.to_owned();
        tokio::spawn(async move {
            inner
                .events
                .publish(Event::killing(&pod, &c, ty, inner.clock.now_ns()));
            let grace = inner.pre_stop(&pod, &c, ty, grace).await;
            // The record carries when the stop was issued; it is published once StopContainer
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

impl Inner {
    /// Runs container `c`'s preStop hook, if the pod spec has one and `grace` is above 0
    /// (kubelet's `killContainer`), within `grace` seconds; returns the grace left for the stop
    /// (kubelet's `executePreStopHook`), never below kubelet's 2 s minimum.
    async fn pre_stop(&self, pod: &PodInfo, c: &ContainerInfo, ty: ProbeType, grace: i64) -> i64 {
        let (Some(hooks), Some(hook)) = (
            &self.hooks,
            pod.api.as_ref().and_then(|a| a.pre_stop(&c.name)),
        ) else {
            return grace.max(MIN_GRACE_SECONDS);
        };
        if grace <= 0 {
            return MIN_GRACE_SECONDS;
        }
        let budget = std::time::Duration::from_secs(grace.unsigned_abs());
        tracing::info!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
            container_id = %c.id, grace_seconds = grace, "running the preStop hook");
        let began = tokio::time::Instant::now();
        match tokio::time::timeout(budget, hooks.run(hook, pod, c, budget)).await {
            Ok(Ok(HookRan::AsWritten)) => {}
            Ok(Ok(HookRan::HttpFallback { host })) => {
                tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                    host = %host, "HTTPS preStop hook got an HTTP response; delivered over HTTP");
                self.metrics.lifecycle_http_fallbacks.inc();
                self.events.publish(Event::lifecycle_http_fallback(
                    pod,
                    c,
                    ty,
                    host,
                    self.clock.now_ns(),
                ));
            }
            Ok(Err(e)) => {
                tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                    container_id = %c.id, error = %e, "preStop hook failed; stopping the container anyway");
                self.events
                    .publish(Event::pre_stop_failed(pod, c, ty, self.clock.now_ns()));
            }
            Err(_) => {
                tracing::info!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                    container_id = %c.id, grace_seconds = grace,
                    "preStop hook did not complete within the grace period");
            }
        }
        let left = grace_after_hook(grace, began.elapsed(), MIN_GRACE_SECONDS);
        tracing::info!(pod = %pod.name, container = %c.name, hook_ms = began.elapsed().as_millis() as u64,
            grace_seconds = left, "preStop hook done; stopping with the grace left");
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_pod_probes;

    fn liveness(grace: Option<i64>) -> ProbeSpec {
        let g = grace.map_or(String::new(), |g| {
            format!(r#","terminationGracePeriodSeconds":{g}"#)
        });
        let ann = format!(r#"{{"c":{{"livenessProbe":{{"exec":{{"command":["x"]}}{g}}}}}}}"#);
        parse_pod_probes(&ann).containers["c"]
            .liveness
            .clone()
            .expect("liveness")
    }

    #[test]
    fn kubelets_grace_order_deletion_then_probe_then_pod_and_the_minimum_last() {
        assert_eq!(kill_grace(&liveness(Some(5)), Some(30), Some(0)), 0);
        assert_eq!(kill_grace(&liveness(Some(5)), Some(30), Some(60)), 60);
        assert_eq!(kill_grace(&liveness(Some(5)), Some(30), None), 5);
        assert_eq!(kill_grace(&liveness(None), Some(0), None), 0);
        assert_eq!(
            kill_grace(&liveness(None), None, None),
            DEFAULT_GRACE_SECONDS
        );
        assert_eq!(grace_seconds(&liveness(None), Some(0)), MIN_GRACE_SECONDS);
    }
}
