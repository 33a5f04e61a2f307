//! kubelet's probe manager: it keeps the [`PodTable`] of pods and their workers, and changes it
//! only through the table's methods. Workers per (pod, container, probe type) appear when a pod
//! with a `podward.io/probes` annotation appears and go with it. Workers publish their own
//! events; the manager hears only what it must act on ([`crate::probing::worker::Sink`], in
//! `sink.rs`): a failure at threshold (to the kill path), a startup success (a readiness
//! trigger) and a worker's exit. What the prober knows of a pod is read
//! through the [`View`].
//!
//! Like kubelet, adding a pod is idempotent and later spec changes seen through CRI are ignored
//! (a worker key that exists is skipped *per key*, not for the rest of the pod: kubelet's
//! early `return` there is a known bug, kubernetes#139888). CRI's copy of the annotation is
//! frozen at sandbox creation anyway; the Kubernetes API's copy is not: when the reflector hands
//! the manager a pod ([`Manager::set_api_pod`]), the API's annotation wins, and an edit of it
//! applies to the running pod (probes added, removed or updated in place, as kubelet's
//! `MutableContainerProbes` does).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::handler::host_policy::NodePolicy;
use crate::metrics::Metrics;
use crate::model::PodInfo;
use crate::model::api_pod::ApiPod;
use crate::pods::pod_table::{
    NewPod, PodEntry, PodTable, UnknownNames, Upsert, Wanted, WorkerEntry,
};
use crate::pods::view::View;
use crate::probing::pod_view::PodView;
use crate::probing::results::Results;
use crate::probing::runner::ProbeRunner;
use crate::probing::worker::handle::WorkerKey;
use crate::probing::worker::{Ctx, SharedPod, Worker};
use crate::publish::event::Events;
use crate::spec::{ContainerProbes, ProbeSpec, ProbeType, StartupGating};

use self::refresh::{Refreshed, refresh};
use self::sink::ManagerSink;

mod annotation;
mod conflicts;
mod refresh;
mod sink;
mod taken_over;
mod unknown;

pub use crate::pods::pod_table::UNKNOWN_CONTAINER_GRACE;

/// What the manager and its sink share.
struct Inner {
    pods: Arc<PodTable>,
    killer: Killer,
    events: Events,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// `--probe-host-policy` and the node IP (a pod probed there is hostNetwork); unset: allow.
    host_policy: OnceLock<NodePolicy>,
}

impl Inner {
    /// Stops workers the table gave up.
    fn stop_workers(&self, workers: Vec<(WorkerKey, WorkerEntry)>) {
        for (key, w) in workers {
            w.ctl.stop();
            self.metrics
                .workers
                .with_label_values(&[key.ty.name()])
                .dec();
        }
    }

    /// Sets the pod's `podward_prober_spec_errors` gauge to `n` errors.
    fn set_spec_errors(&self, pod: &PodInfo, n: usize) {
        self.metrics
            .spec_errors
            .with_label_values(&[&pod.name, &pod.namespace, &pod.uid])
            .set(n as f64);
    }
}

/// The probe manager. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
    ctx: Arc<Ctx>,
    view: View,
}

impl Manager {
    /// A manager with no pods: workers probe through `runner` and publish to `events`,
    /// failures at threshold go to `killer`.
    pub fn new(
        runner: Arc<dyn ProbeRunner>,
        killer: Killer,
        events: Events,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Self {
        let pods = Arc::new(PodTable::default());
        let results = Arc::new(Results::new());
        let inner = Arc::new(Inner {
            pods: pods.clone(),
            killer: killer.clone(),
            events: events.clone(),
            metrics: metrics.clone(),
            clock,
            host_policy: OnceLock::new(),
        });
        let sink = Arc::new(ManagerSink::new(&inner));
        let view = View::new(pods, results.clone(), killer, runner.clone(), clock);
        let ctx = Arc::new(Ctx {
            results,
            runner,
            clock,
            sink,
            events,
            metrics,
            starvation: OnceLock::new(),
            starved_logged_at_ns: std::sync::atomic::AtomicI64::new(i64::MIN),
        });
        Self { inner, ctx, view }
    }

    /// Sets `--probe-host-policy`: a probe it refuses on its spec alone is a spec error with no
    /// worker. Set once, before the first pod; a second call is ignored.
    pub fn with_host_policy(self, policy: NodePolicy) -> Self {
        let _ = self.inner.host_policy.set(policy);
        self
    }

    /// Measures the prober's own starvation with `meter`: a probe that timed out while the
    /// prober was starved is then retried rather than failed (`docs/prober.md`, "Starvation").
    /// Set once, before the first pod; a second call is ignored. Unset, every timeout counts.
    pub fn with_starvation(
        self,
        meter: Arc<dyn crate::probing::starvation::StarvationMeter>,
    ) -> Self {
        let _ = self.ctx.starvation.set(meter);
        self
    }

    /// The prober's metrics (for tests and the embedding).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// What the prober knows of its pods: readiness for the gate, `Status` for the API.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The pods and workers the manager keeps.
    pub fn registry(&self) -> &PodTable {
        &self.inner.pods
    }

    /// Replaces the whole view (a source snapshot): pods not in `pods` are removed, the others
    /// added or updated. Workers of pods that stay keep their counters.
    pub fn sync_all(&self, pods: Vec<PodInfo>) {
        let keep: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
        for uid in self.inner.pods.uids_not_in(&keep) {
            self.remove_pod(&uid);
        }
        for p in pods {
            self.update_pod(p);
        }
    }

    /// Adds a pod or refreshes its containers and fields. Probe specs of a known pod are kept
    /// unless the API's copy of its annotation changed.
    pub fn update_pod(&self, mut pod: PodInfo) {
        let table = &self.inner.pods;
        pod.api = table.api(&pod.uid);
        let uid = pod.uid.clone();
        let upserted = table.upsert(pod, refresh, |pod| self.new_entry(pod));
        match upserted {
            Upsert::Known((uid, changed)) => self.refreshed(&uid, changed),
            Upsert::Added => self.reconcile_names(&uid),
            Upsert::Idle => {} // not probed (yet)
        }
    }

    /// The entry of a pod met for the first time, or the pod back when it has no probes.
    fn new_entry(&self, pod: PodInfo) -> NewPod {
        let Some(annotation) = annotation::effective_annotation(&pod).map(str::to_owned) else {
            return NewPod::Idle(pod);
        };
        let annotation::Parsed {
            probes: parsed,
            invalid,
        } = self.parse(&pod, &annotation);
        self.inner.set_spec_errors(&pod, parsed.errors.len());
        let shared: SharedPod = Arc::new(PodView::new(pod));
        // Every name waits for its container; `reconcile_names` starts the workers of those the
        // pod has and reports those it cannot have.
        let unknown = UnknownNames {
            pending: parsed.containers.keys().cloned().collect(),
            ..UnknownNames::default()
        };
        let startup = annotation::startup_gating(&parsed);
        NewPod::Probed(Box::new(PodEntry {
            shared,
            spec_errors: parsed.errors,
            invalid,
            startup,
            annotation,
            probes: parsed.containers,
            unknown,
        }))
    }

    /// After a known pod was refreshed: a changed annotation (the API's copy) is applied, and a
    /// container that just started gets its readiness probed at once.
    fn refreshed(&self, uid: &str, changed: Refreshed) {
        if let Some(wanted) = changed.annotation {
            self.reannotate(uid, wanted);
        }
        self.reconcile_names(uid);
        // kubelet's pod sync after a container start triggers the readiness worker at once.
        for name in changed.started {
            self.trigger(uid, &name, ProbeType::Readiness);
        }
    }

    /// Starts the workers of container `name` of pod `uid` (those not already running).
    fn spawn_workers(&self, uid: &str, name: &str, probes: &ContainerProbes, shared: &SharedPod) {
        let specs = annotation::container_worker_specs(uid, name, probes.clone());
        self.inner.pods.add_workers(specs, |key, spec, startup| {
            self.spawn(key, spec, startup, shared)
        });
    }

    /// Takes the Kubernetes API's view of a pod (the reflector's): its annotation wins over
    /// CRI's, its restart policy, phase, deletion and preStop hooks reach the workers and the
    /// kill path. The first view of a pod whose probes were taken over may announce it
    /// (`ProbesTakenOver`, see `taken_over.rs`).
    pub fn set_api_pod(&self, api: ApiPod) {
        let table = &self.inner.pods;
        let uid = api.uid.clone();
        let api = Arc::new(api);
        if table.set_api(api.clone()) {
            taken_over::announce(&api, &self.inner.events, self.inner.clock.now_ns());
        }
        if let Some(pod) = table.pod(&uid) {
            self.update_pod(pod);
        }
    }

    /// Forgets the API's view of pod `uid` (deleted, or gone from a relist). Its workers keep
    /// running until CRI says the pod is gone, with the specs they have.
    pub fn remove_api_pod(&self, uid: &str) {
        self.inner.pods.clear_api(uid);
    }

    /// The annotation of pod `uid` became `annotation` (through the API): start, update or stop
    /// workers so that they match it.
    fn reannotate(&self, uid: &str, annotation: Option<String>) {
        let table = &self.inner.pods;
        let Some(annotation) = annotation else {
            // No probes any more: stop them all, keep the pod as an idle one.
            let pod = table.entry(uid, |e| PodInfo::clone(&e.shared.read()));
            self.remove_pod(uid);
            if let Some(pod) = pod {
                table.set_idle(pod);
            }
            return;
        };
        let applied = table.entry(uid, |entry| {
            let shared = entry.shared.clone();
            let pod = shared.read().clone();
            let annotation::Parsed {
                probes: parsed,
                invalid,
            } = self.parse(&pod, &annotation);
            tracing::info!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                "the podward.io/probes annotation changed; applying it to the running pod");
            entry.spec_errors = parsed.errors.clone();
            entry.invalid = invalid;
            entry.startup = annotation::startup_gating(&parsed);
            entry.annotation = annotation;
            // A name the new annotation drops is no longer an error; one it keeps stays unknown
            // (no worker, no probes kept) until its container appears.
            let probes = &parsed.containers;
            entry.unknown.names.retain(|n| probes.contains_key(n));
            let unknown = entry.unknown.names.clone();
            entry.probes = parsed.containers.clone();
            entry.probes.retain(|n, _| !unknown.contains(n));
            // Names the pod does not have (yet) wait for their container without workers.
            entry.unknown.pending = entry
                .probes
                .keys()
                .filter(|n| !unknown::pod_has(&pod, n))
                .cloned()
                .collect();
            let pending = entry.unknown.pending.clone();
            self.inner
                .set_spec_errors(&pod, entry.spec_errors.len() + unknown.len());
            let wanted: Wanted = annotation::worker_specs(uid, parsed)
                .into_iter()
                .filter(|(k, _, _)| {
                    !unknown.contains(&k.container) && !pending.contains(&k.container)
                })
                .map(|(k, spec, startup)| (k, (Arc::new(spec), startup)))
                .collect();
            (wanted, shared)
        });
        if let Some((wanted, shared)) = applied {
            self.apply_workers(uid, wanted, &shared);
        }
    }

    /// Brings pod `uid`'s workers to `wanted`: the others stop, those whose spec changed get
    /// the new one in place (counters restart, the published result stays), missing ones start.
    fn apply_workers(&self, uid: &str, wanted: Wanted, shared: &SharedPod) {
        let unwanted = self
            .inner
            .pods
            .reconcile_workers(uid, wanted, |key, spec, startup| {
                self.spawn(key, spec, startup, shared)
            });
        self.inner.stop_workers(unwanted);
    }

    /// The pod's annotation parsed under this node's host policy.
    fn parse(&self, pod: &PodInfo, annotation: &str) -> annotation::Parsed {
        annotation::parse(
            pod,
            annotation,
            self.inner.host_policy.get(),
            &self.inner.events,
            self.inner.clock.now_ns(),
        )
    }

    /// Starts the worker for `key` and returns its table entry.
    fn spawn(
        &self,
        key: WorkerKey,
        spec: ProbeSpec,
        startup: StartupGating,
        shared: &SharedPod,
    ) -> WorkerEntry {
        let ty = key.ty;
        let spec = Arc::new(spec);
        let w = Worker::new(
            key.clone(),
            spec.clone(),
            startup,
            shared.clone(),
            self.ctx.clone(),
        );
        let entry = WorkerEntry {
            ctl: w.ctl(),
            status: w.status(),
            spec,
            startup,
        };
        self.inner
            .metrics
            .workers
            .with_label_values(&[ty.name()])
            .inc();
        tokio::spawn(w.run());
        entry
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`). Idempotent.
    pub fn remove_pod(&self, uid: &str) -> bool {
        let Some((entry, workers)) = self.inner.pods.remove(uid) else {
            return false;
        };
        self.inner.stop_workers(workers);
        let p = entry.shared.read();
        let _ =
            self.inner
                .metrics
                .spec_errors
                .remove_label_values(&[&p.name, &p.namespace, &p.uid]);
        self.inner.killer.forget_pod(uid);
        true
    }

    /// Stops the workers of the given pods (kubelet's `CleanupPods`, told by the housekeeper);
    /// returns those that were known.
    pub fn cleanup(&self, gone: &[String]) -> Vec<String> {
        gone.iter()
            .filter(|u| self.remove_pod(u))
            .cloned()
            .collect()
    }

    /// Stops every worker (shutdown).
    pub fn stop_all(&self) {
        for uid in self.inner.pods.pod_uids() {
            self.remove_pod(&uid);
        }
    }

    fn trigger(&self, uid: &str, container: &str, ty: ProbeType) {
        self.inner.pods.trigger(uid, container, ty);
    }
}
