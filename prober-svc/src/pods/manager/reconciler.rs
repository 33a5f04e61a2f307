//! The manager's reconciler: it records what the manager is told in the [`PodTable`] and brings
//! each pod's running workers to the set the pod wants. For one pod, [`Reconciler::reconcile`]
//! follows its names (which wait for a container, which are unknown: `unknown.rs`), decides the
//! wanted workers from its entry alone ([`super::wanted`], pure) and acts: the table starts the
//! missing ones, updates those whose spec changed in place and hands back the others, which
//! stop. It is also where the workers' sink ends up (`sink.rs`): a kill, a readiness trigger,
//! an exited worker.

use std::sync::{Arc, Weak};

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::handler::host_policy::NodePolicy;
use crate::metrics::Metrics;
use crate::model::{ContainerInfo, PodInfo};
use crate::pods::pod_table::{NewPod, PodTable, WorkerEntry};
use crate::probing::results::Results;
use crate::probing::runner::ProbeRunner;
use crate::probing::worker::handle::{WorkerCtl, WorkerKey};
use crate::probing::worker::{Ctx, SharedPod, Sink, Worker};
use crate::publish::event::Events;
use crate::spec::{ProbeSpec, ProbeType, StartupGating};

use super::annotation::{self, Parsed};
use super::settings::Settings;
use super::{entry, unknown, wanted};

/// The pod table and what acting on it takes: the workers' context, the kill path, events,
/// metrics, time and the node's host policy.
pub(super) struct Reconciler {
    pods: Arc<PodTable>,
    ctx: Arc<Ctx>,
    killer: Killer,
    events: Events,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// `--probe-host-policy` and the node IP (a pod probed there is hostNetwork); `None`: allow.
    host_policy: Option<NodePolicy>,
}

impl Reconciler {
    /// A reconciler of an empty table, with its workers' context built from `runner`, `events`,
    /// `metrics`, `clock` and `settings`; `sink` makes the workers' sink from a weak handle of
    /// the reconciler (workers do not keep it alive).
    pub(super) fn new(
        runner: Arc<dyn ProbeRunner>,
        killer: Killer,
        events: Events,
        metrics: Arc<Metrics>,
        clock: Clock,
        settings: Settings,
        sink: impl FnOnce(Weak<Self>) -> Arc<dyn Sink>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            pods: Arc::new(PodTable::default()),
            ctx: Arc::new(Ctx::new(
                Arc::new(Results::new()),
                runner,
                clock,
                sink(me.clone()),
                events.clone(),
                metrics.clone(),
                settings.starvation,
            )),
            killer,
            events,
            metrics,
            clock,
            host_policy: settings.host_policy,
        })
    }

    /// The table of pods and workers.
    pub(super) fn table(&self) -> &Arc<PodTable> {
        &self.pods
    }

    /// The results cache the workers publish into.
    pub(super) fn results(&self) -> &Arc<Results> {
        &self.ctx.results
    }

    /// The prober's metrics.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The events the manager publishes on.
    pub(super) fn events(&self) -> &Events {
        &self.events
    }

    /// Now, as Unix ns.
    pub(super) fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    /// The entry of a pod met for the first time, or the pod back when it has no probes.
    pub(super) fn new_entry(&self, pod: PodInfo) -> NewPod {
        let Some(annotation) = annotation::effective_annotation(&pod).map(str::to_owned) else {
            return NewPod::Idle(pod);
        };
        let parsed = self.parse(&pod, &annotation);
        self.set_spec_errors(&pod, parsed.probes.errors.len());
        NewPod::Probed(Box::new(entry::new_entry(pod, annotation, parsed)))
    }

    /// The annotation of probed pod `uid` became `annotation` (through the API): records it in
    /// the pod's entry. With no annotation any more, the pod's workers stop and it is kept as
    /// an idle pod; returns whether the pod is still probed.
    pub(super) fn reannotate(&self, uid: &str, annotation: Option<String>) -> bool {
        let Some(annotation) = annotation else {
            let pod = self.pods.entry(uid, |e| PodInfo::clone(&e.shared.read()));
            self.remove(uid);
            if let Some(pod) = pod {
                self.pods.set_idle(pod);
            }
            return false;
        };
        self.pods.entry(uid, |e| {
            let pod = PodInfo::clone(&e.shared.read());
            let parsed = self.parse(&pod, &annotation);
            tracing::info!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                "the podward.io/probes annotation changed; applying it to the running pod");
            let errors = entry::reannotate(e, &pod, annotation, parsed);
            self.set_spec_errors(&pod, errors);
        });
        true
    }

    /// Brings probed pod `uid`'s workers to what it wants now: its names are followed (see
    /// `unknown.rs`), then [`Reconciler::apply`]. A name still without a container schedules
    /// the check that reports it unknown after the grace.
    pub(super) fn reconcile(self: &Arc<Self>, uid: &str) {
        let followed = self.pods.entry(uid, |e| {
            let followed = unknown::follow(e, |pod, annotation| self.parse(pod, annotation).probes);
            if let Some(n) = followed.errors {
                self.set_spec_errors(&e.shared.read(), n);
            }
            followed.schedule
        });
        let Some(schedule) = followed else {
            return;
        };
        self.apply(uid);
        if schedule {
            tokio::spawn(check(Arc::downgrade(self), uid.to_owned()));
        }
    }

    /// Brings pod `uid`'s running workers to the set its entry wants ([`wanted::wanted`]): the
    /// others stop, those whose spec changed get the new one in place (counters restart, the
    /// published result stays), missing ones start.
    fn apply(&self, uid: &str) {
        let unwanted = self.pods.reconcile(
            uid,
            |e| wanted::wanted(uid, e),
            |shared, key, spec, startup| self.spawn(shared, key, spec, startup),
        );
        self.stop_workers(unwanted);
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`); whether it was known.
    pub(super) fn remove(&self, uid: &str) -> bool {
        let Some((entry, workers)) = self.pods.remove(uid) else {
            return false;
        };
        self.stop_workers(workers);
        let p = entry.shared.read();
        let _ = self
            .metrics
            .spec_errors
            .remove_label_values(&[&p.name, &p.namespace, &p.uid]);
        self.killer.forget_pod(uid);
        true
    }

    /// Worker `key` reached its failure threshold: the kill, while the pod is still followed. A
    /// probe in flight when its pod was removed must not kill (nor count a kill in a series
    /// [`Reconciler::remove`] already deleted): checked and killed as one step of the table, so
    /// a removal comes either before (no kill) or after (it forgets this one too).
    pub(super) fn kill(
        &self,
        key: &WorkerKey,
        pod: &PodInfo,
        c: &ContainerInfo,
        spec: &ProbeSpec,
        output: &str,
    ) {
        self.pods.while_probed(&pod.uid, || {
            self.killer.kill(pod, c, key.ty, spec, output);
        });
    }

    /// Probes the readiness of container `container` of pod `uid` now, if it has a worker.
    pub(super) fn trigger_readiness(&self, uid: &str, container: &str) {
        self.pods.trigger(uid, container, ProbeType::Readiness);
    }

    /// Worker `key` (controlled by `ctl`) ended: forgotten if the table still has it.
    pub(super) fn exited(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>) {
        if self.pods.remove_worker(key, ctl) {
            self.count_worker(key.ty, -1);
        }
    }

    /// The pod's annotation parsed under this node's host policy.
    fn parse(&self, pod: &PodInfo, annotation: &str) -> Parsed {
        annotation::parse(
            pod,
            annotation,
            self.host_policy.as_ref(),
            &self.events,
            self.clock.now_ns(),
        )
    }

    /// Starts the worker for `key` on pod view `shared` and returns its table entry.
    fn spawn(
        &self,
        shared: &SharedPod,
        key: WorkerKey,
        spec: ProbeSpec,
        startup: StartupGating,
    ) -> WorkerEntry {
        let ty = key.ty;
        let spec = Arc::new(spec);
        let w = Worker::new(key, spec.clone(), startup, shared.clone(), self.ctx.clone());
        let entry = WorkerEntry {
            ctl: w.ctl(),
            status: w.status(),
            spec,
            startup,
        };
        self.count_worker(ty, 1);
        tokio::spawn(w.run());
        entry
    }

    /// Stops workers the table gave up.
    fn stop_workers(&self, workers: Vec<(WorkerKey, WorkerEntry)>) {
        for (key, w) in workers {
            w.ctl.stop();
            self.count_worker(key.ty, -1);
        }
    }

    /// Moves the `podward_prober_workers` gauge of probe type `ty` by `by`.
    fn count_worker(&self, ty: ProbeType, by: i64) {
        self.metrics.workers.with_label_values(&[ty.name()]).add(by);
    }

    /// Sets the pod's `podward_prober_spec_errors` gauge to `n` errors.
    fn set_spec_errors(&self, pod: &PodInfo, n: usize) {
        self.metrics
            .spec_errors
            .with_label_values(&[&pod.name, &pod.namespace, &pod.uid])
            .set(n as f64);
    }

    /// The check of pod `uid`'s names ([`unknown::flag`]): the names it reports lose their
    /// workers.
    fn flag(&self, uid: &str) {
        let flagged = self.pods.entry(uid, |e| {
            let (pod, errors, flagged) = unknown::flag(e);
            self.set_spec_errors(&pod, errors);
            flagged
        });
        if flagged == Some(true) {
            self.apply(uid);
        }
    }
}

/// Waits out the grace from pod `uid`'s last new container, then reports the names still
/// missing ([`Reconciler::flag`]).
async fn check(rec: Weak<Reconciler>, uid: String) {
    loop {
        let due = {
            let Some(rec) = rec.upgrade() else { return };
            let Some(due) = rec.pods.entry(&uid, unknown::due) else {
                return;
            };
            due
        };
        tokio::time::sleep_until(due).await;
        let Some(rec) = rec.upgrade() else { return };
        let Some(still_new) = rec.pods.entry(&uid, unknown::still_new) else {
            return;
        };
        if !still_new {
            rec.flag(&uid);
            return;
        }
    }
}
