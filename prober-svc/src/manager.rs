//! kubelet's probe manager: it keeps the [`Registry`] of pods and their workers. Workers per
//! (pod, container, probe type) appear when a pod with a `podward.io/probes` annotation appears
//! and go with it. Workers publish their own events; the manager hears only what it must act on
//! ([`crate::probing::worker::Sink`], in `sink.rs`): a failure at threshold (to the kill path), a startup
//! success (a readiness trigger) and a worker's exit. What the prober knows of a pod is read
//! through the [`View`].
//!
//! Like kubelet, adding a pod is idempotent and later spec changes seen through CRI are ignored
//! (a worker key that exists is skipped *per key*, not for the rest of the pod: kubelet's
//! early `return` there is a known bug, kubernetes#139888). CRI's copy of the annotation is
//! frozen at sandbox creation anyway; the Kubernetes API's copy is not: when the reflector hands
//! the manager a pod ([`Manager::set_api_pod`]), the API's annotation wins, and an edit of it
//! applies to the running pod (probes added, removed or updated in place, as kubelet's
//! `MutableContainerProbes` does).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::event::Events;
use crate::handler::host_policy::NodePolicy;
use crate::metrics::Metrics;
use crate::model::PodInfo;
use crate::model::api_pod::ApiPod;
use crate::probing::pod_view::PodView;
use crate::probing::results::Results;
use crate::probing::runner::ProbeRunner;
use crate::probing::worker::handle::{SpecUpdate, WorkerKey};
use crate::probing::worker::{Ctx, SharedPod, Worker};
use crate::registry::{PodEntry, Registry, UnknownNames, WorkerEntry, pod_workers};
use crate::spec::{ContainerProbes, ProbeSpec, ProbeType, StartupGating};
use crate::view::View;

use self::refresh::{Refreshed, refresh};
use self::sink::ManagerSink;

mod annotation;
mod conflicts;
mod refresh;
mod sink;
mod taken_over;
mod unknown;

pub use crate::registry::UNKNOWN_CONTAINER_GRACE;

/// What the manager and its sink share.
struct Inner {
    registry: Arc<Registry>,
    killer: Killer,
    events: Events,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// `--probe-host-policy` and the node IP (a pod probed there is hostNetwork); unset: allow.
    host_policy: OnceLock<NodePolicy>,
}

impl Inner {
    /// Stops and forgets worker `key`, if it runs.
    fn stop_worker(&self, workers: &mut BTreeMap<WorkerKey, WorkerEntry>, key: &WorkerKey) {
        if let Some(w) = workers.remove(key) {
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
        let registry = Arc::new(Registry::default());
        let results = Arc::new(Results::new());
        let inner = Arc::new(Inner {
            registry: registry.clone(),
            killer: killer.clone(),
            events: events.clone(),
            metrics: metrics.clone(),
            clock,
            host_policy: OnceLock::new(),
        });
        let sink = Arc::new(ManagerSink::new(&inner));
        let view = View::new(registry, results.clone(), killer, runner.clone(), clock);
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
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Replaces the whole view (a source snapshot): pods not in `pods` are removed, the others
    /// added or updated. Workers of pods that stay keep their counters.
    pub fn sync_all(&self, pods: Vec<PodInfo>) {
        let reg = &self.inner.registry;
        let keep: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
        let mut gone: Vec<String> = reg
            .pods
            .lock()
            .keys()
            .filter(|u| !keep.contains(*u))
            .cloned()
            .collect();
        gone.extend(
            reg.idle
                .lock()
                .keys()
                .filter(|u| !keep.contains(*u))
                .cloned(),
        );
        for uid in gone {
            self.remove_pod(&uid);
        }
        for p in pods {
            self.update_pod(p);
        }
    }

    /// Adds a pod or refreshes its containers and fields. Probe specs of a known pod are kept
    /// unless the API's copy of its annotation changed.
    pub fn update_pod(&self, mut pod: PodInfo) {
        let reg = &self.inner.registry;
        pod.api = reg.api.lock().get(&pod.uid).cloned();
        // Held from the lookup to the insert: two sources telling of one new pod at once must
        // not make two entries (the first one's workers would follow a pod nobody updates).
        let mut pods = reg.pods.lock();
        if let Some(entry) = pods.get(&pod.uid) {
            let (uid, changed) = refresh(entry, pod);
            drop(pods);
            return self.refreshed(&uid, changed);
        }
        let Some(annotation) = annotation::effective_annotation(&pod).map(str::to_owned) else {
            drop(pods);
            reg.idle.lock().insert(pod.uid.clone(), pod);
            return; // not probed (yet)
        };
        reg.idle.lock().remove(&pod.uid);
        let annotation::Parsed {
            probes: parsed,
            invalid,
        } = self.parse(&pod, &annotation);
        self.inner.set_spec_errors(&pod, parsed.errors.len());
        let uid = pod.uid.clone();
        let shared: SharedPod = Arc::new(PodView::new(pod));
        // Every name waits for its container; `reconcile_names` starts the workers of those the
        // pod has and reports those it cannot have.
        let unknown = UnknownNames {
            pending: parsed.containers.keys().cloned().collect(),
            ..UnknownNames::default()
        };
        let startup = annotation::startup_gating(&parsed);
        pods.insert(
            uid.clone(),
            PodEntry {
                shared,
                spec_errors: parsed.errors,
                invalid,
                startup,
                annotation,
                probes: parsed.containers,
                unknown,
            },
        );
        drop(pods);
        self.reconcile_names(&uid);
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
        let mut workers = self.inner.registry.workers.lock();
        for (key, spec, startup) in annotation::container_worker_specs(uid, name, probes.clone()) {
            if !workers.contains_key(&key) {
                self.spawn(&mut workers, key, spec, startup, shared);
            }
        }
    }

    /// Takes the Kubernetes API's view of a pod (the reflector's): its annotation wins over
    /// CRI's, its restart policy, phase, deletion and preStop hooks reach the workers and the
    /// kill path. The first view of a pod whose probes were taken over may announce it
    /// (`ProbesTakenOver`, see `taken_over.rs`).
    pub fn set_api_pod(&self, api: ApiPod) {
        let reg = &self.inner.registry;
        let uid = api.uid.clone();
        let api = Arc::new(api);
        let first = reg.api.lock().insert(uid.clone(), api.clone()).is_none();
        if first {
            taken_over::announce(&api, &self.inner.events, self.inner.clock.now_ns());
        }
        let current = {
            let pods = reg.pods.lock();
            pods.get(&uid).map(|e| PodInfo::clone(&e.shared.read()))
        };
        let idle = reg.idle.lock().get(&uid).cloned();
        if let Some(pod) = current.or(idle) {
            self.update_pod(pod);
        }
    }

    /// Forgets the API's view of pod `uid` (deleted, or gone from a relist). Its workers keep
    /// running until CRI says the pod is gone, with the specs they have.
    pub fn remove_api_pod(&self, uid: &str) {
        let reg = &self.inner.registry;
        if reg.api.lock().remove(uid).is_none() {
            return;
        }
        if let Some(e) = reg.pods.lock().get(uid) {
            let mut cur = e.shared.write();
            let mut pod = PodInfo::clone(&cur);
            pod.api = None;
            *cur = Arc::new(pod);
        }
    }

    /// The annotation of pod `uid` became `annotation` (through the API): start, update or stop
    /// workers so that they match it.
    fn reannotate(&self, uid: &str, annotation: Option<String>) {
        let reg = &self.inner.registry;
        let Some(annotation) = annotation else {
            // No probes any more: stop them all, keep the pod as an idle one.
            let pod = reg
                .pods
                .lock()
                .get(uid)
                .map(|e| PodInfo::clone(&e.shared.read()));
            self.remove_pod(uid);
            if let Some(pod) = pod {
                reg.idle.lock().insert(uid.to_owned(), pod);
            }
            return;
        };
        let mut pods = reg.pods.lock();
        let Some(entry) = pods.get_mut(uid) else {
            return;
        };
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
        drop(pods);
        let wanted: BTreeMap<WorkerKey, (Arc<ProbeSpec>, StartupGating)> =
            annotation::worker_specs(uid, parsed)
                .into_iter()
                .filter(|(k, _, _)| {
                    !unknown.contains(&k.container) && !pending.contains(&k.container)
                })
                .map(|(k, spec, startup)| (k, (Arc::new(spec), startup)))
                .collect();
        self.apply_workers(uid, wanted, &shared);
    }

    /// Brings pod `uid`'s workers to `wanted`: the others stop, those whose spec changed get
    /// the new one in place (counters restart, the published result stays), missing ones start.
    fn apply_workers(
        &self,
        uid: &str,
        wanted: BTreeMap<WorkerKey, (Arc<ProbeSpec>, StartupGating)>,
        shared: &SharedPod,
    ) {
        let mut workers = self.inner.registry.workers.lock();
        let existing: Vec<WorkerKey> = pod_workers(&workers, uid).map(|(k, _)| k.clone()).collect();
        for key in existing {
            match wanted.get(&key) {
                None => self.inner.stop_worker(&mut workers, &key),
                Some((spec, startup)) => {
                    if let Some(w) = workers.get_mut(&key)
                        && (w.spec != *spec || w.startup != *startup)
                    {
                        w.spec = spec.clone();
                        w.startup = *startup;
                        w.ctl.update(SpecUpdate {
                            spec: spec.clone(),
                            startup: *startup,
                        });
                    }
                }
            }
        }
        for (key, (spec, startup)) in wanted {
            if !workers.contains_key(&key) {
                self.spawn(&mut workers, key, ProbeSpec::clone(&spec), startup, shared);
            }
        }
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

    fn spawn(
        &self,
        workers: &mut BTreeMap<WorkerKey, WorkerEntry>,
        key: WorkerKey,
        spec: ProbeSpec,
        startup: StartupGating,
        shared: &SharedPod,
    ) {
        let ty = key.ty;
        let spec = Arc::new(spec);
        let w = Worker::new(
            key.clone(),
            spec.clone(),
            startup,
            shared.clone(),
            self.ctx.clone(),
        );
        workers.insert(
            key,
            WorkerEntry {
                ctl: w.ctl(),
                status: w.status(),
                spec,
                startup,
            },
        );
        self.inner
            .metrics
            .workers
            .with_label_values(&[ty.name()])
            .inc();
        tokio::spawn(w.run());
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`). Idempotent.
    pub fn remove_pod(&self, uid: &str) -> bool {
        let reg = &self.inner.registry;
        reg.idle.lock().remove(uid);
        let Some(entry) = reg.pods.lock().remove(uid) else {
            return false;
        };
        let mut workers = reg.workers.lock();
        let keys: Vec<WorkerKey> = pod_workers(&workers, uid).map(|(k, _)| k.clone()).collect();
        for k in keys {
            self.inner.stop_worker(&mut workers, &k);
        }
        drop(workers);
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
        for uid in self.inner.registry.pod_uids() {
            self.remove_pod(&uid);
        }
    }

    fn trigger(&self, uid: &str, container: &str, ty: ProbeType) {
        trigger(&self.inner.registry, uid, container, ty);
    }
}

/// Triggers worker (`uid`, `container`, `ty`) if it runs.
fn trigger(registry: &Registry, uid: &str, container: &str, ty: ProbeType) {
    let workers = registry.workers.lock();
    if let Some(w) = crate::registry::worker(&workers, uid, container, ty) {
        w.ctl.trigger();
    }
}
