//! kubelet's probe manager: it tracks pods and their workers. Workers per (pod, container, probe
//! type) appear when a pod with a `podward.io/probes` annotation appears and go with it; what a
//! worker reports goes on as an event (result changes), to the kill path (failures at threshold)
//! or back to a worker (readiness trigger after startup).
//!
//! Like kubelet, adding a pod is idempotent and later spec changes seen through CRI are ignored
//! (a worker key that exists is skipped *per key*, not for the rest of the pod: kubelet's
//! early `return` there is a known bug, kubernetes#139888). CRI's copy of the annotation is
//! frozen at sandbox creation anyway; the Kubernetes API's copy is not: when the reflector hands
//! the manager a pod ([`Manager::set_api_pod`]), the API's annotation wins, and an edit of it
//! applies to the running pod (probes added, removed or updated in place, as kubelet's
//! `MutableContainerProbes` does).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock};

use crate::clock::Clock;
use crate::event::Probed;
use crate::event::{Event, Events};
use crate::handler::host_policy::NodePolicy;
use crate::handler::output::capped;
use crate::kill::Killer;
use crate::metrics::Metrics;
use crate::model::api::{ApiPod, ContainerKind};
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::results::{ProbeResult, Results};
use crate::runner::ProbeRunner;
use crate::spec::{ContainerProbes, PodProbes, ProbeSpec, ProbeType, SpecError, parse_pod_probes};
use crate::worker::handle::{SpecUpdate, WorkerCtl, WorkerKey, WorkerStatus};
use crate::worker::{Ctx, SharedPod, Sink, Worker};

mod conflicts;
pub mod readiness;
mod status;
mod unknown;

pub use unknown::UNKNOWN_CONTAINER_GRACE;

/// A probed pod.
struct PodEntry {
    shared: SharedPod,
    spec_errors: Vec<SpecError>,
    /// Container names with a startup probe (they gate liveness and readiness).
    has_startup: HashSet<String>,
    /// The annotation text the workers were built from.
    annotation: String,
    /// The annotation's probes per container name (to start the workers of a name again when
    /// its container appears after it was reported unknown).
    probes: BTreeMap<String, ContainerProbes>,
    /// Names of the annotation with no such container in the pod: spec errors, no workers.
    unknown: unknown::Unknown,
}

/// A running worker.
struct WorkerEntry {
    ctl: Arc<WorkerCtl>,
    status: Arc<Mutex<WorkerStatus>>,
    /// The spec it runs (compared when the annotation changes).
    spec: Arc<ProbeSpec>,
    /// Whether its container has a startup probe.
    has_startup: bool,
}

struct State {
    pods: Mutex<HashMap<String, PodEntry>>,
    /// Pods without probes, as the source last showed them: an annotation added later through
    /// the API starts probing them.
    idle: Mutex<HashMap<String, PodInfo>>,
    /// What the Kubernetes API says of each pod on the node (the reflector's view).
    api: Mutex<HashMap<String, Arc<ApiPod>>>,
    workers: Mutex<BTreeMap<WorkerKey, WorkerEntry>>,
    killer: Killer,
    events: Events,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// `--probe-host-policy` and the node IP (a pod probed there is hostNetwork); unset: allow.
    host_policy: OnceLock<NodePolicy>,
}

impl State {
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
}

/// The probe manager. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    state: Arc<State>,
    ctx: Arc<Ctx>,
}

impl Manager {
    /// A manager with no pods: workers probe through `runner`, failures at threshold go to
    /// `killer`, result changes to `events`.
    pub fn new(
        runner: Arc<dyn ProbeRunner>,
        killer: Killer,
        events: Events,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Self {
        let state = Arc::new(State {
            pods: Mutex::new(HashMap::new()),
            idle: Mutex::new(HashMap::new()),
            api: Mutex::new(HashMap::new()),
            workers: Mutex::new(BTreeMap::new()),
            killer,
            events,
            metrics: metrics.clone(),
            clock,
            host_policy: OnceLock::new(),
        });
        let sink = Arc::new(ManagerSink {
            state: Arc::downgrade(&state),
        });
        let ctx = Arc::new(Ctx {
            results: Results::new(),
            runner,
            clock,
            sink,
            metrics,
            starvation: OnceLock::new(),
            starved_logged_at_ns: std::sync::atomic::AtomicI64::new(i64::MIN),
        });
        Self { state, ctx }
    }

    /// Sets `--probe-host-policy`: a probe it refuses on its spec alone is a spec error with no
    /// worker. Set once, before the first pod; a second call is ignored.
    pub fn with_host_policy(self, policy: NodePolicy) -> Self {
        let _ = self.state.host_policy.set(policy);
        self
    }

    /// Measures the prober's own starvation with `meter`: a probe that timed out while the
    /// prober was starved is then retried rather than failed (`docs/prober.md`, "Starvation").
    /// Set once, before the first pod; a second call is ignored. Unset, every timeout counts.
    pub fn with_starvation(self, meter: Arc<dyn crate::starvation::StarvationMeter>) -> Self {
        let _ = self.ctx.starvation.set(meter);
        self
    }

    /// The prober's metrics (for tests and the embedding).
    pub fn metrics(&self) -> &Metrics {
        &self.state.metrics
    }

    /// The results cache (for tests and the API).
    pub fn results(&self) -> &Results {
        &self.ctx.results
    }

    /// Number of running workers.
    pub fn worker_count(&self) -> usize {
        self.state.workers.lock().len()
    }

    /// UIDs of the pods the manager follows.
    pub fn pod_uids(&self) -> Vec<String> {
        self.state.pods.lock().keys().cloned().collect()
    }

    /// Replaces the whole view (a source snapshot): pods not in `pods` are removed, the others
    /// added or updated. Workers of pods that stay keep their counters.
    pub fn sync_all(&self, pods: Vec<PodInfo>) {
        let keep: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
        let mut gone: Vec<String> = self
            .state
            .pods
            .lock()
            .keys()
            .filter(|u| !keep.contains(*u))
            .cloned()
            .collect();
        gone.extend(
            self.state
                .idle
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
        pod.api = self.state.api.lock().get(&pod.uid).cloned();
        let mut pods = self.state.pods.lock();
        if let Some(entry) = pods.get(&pod.uid) {
            // Only the API's copy can change what runs: CRI's is frozen at sandbox creation,
            // and kubelet ignores spec updates of a known pod.
            let wanted = pod.api.as_ref().map(|a| a.probes_annotation.clone());
            let (started, uid, kinds_changed) = {
                let mut cur = entry.shared.write();
                let started = newly_running(&cur, &pod);
                // Which names are init or ephemeral containers, which probes the spec declares
                // and whether the pod is gated are known only from the API: when that view
                // arrives (or they change), the annotation is parsed again, whatever came first.
                let kinds_changed = parse_facts(&cur) != parse_facts(&pod);
                *cur = Arc::new(pod);
                (started, cur.uid.clone(), kinds_changed)
            };
            let changed = wanted.as_ref().is_some_and(|w| {
                w.as_deref() != Some(entry.annotation.as_str()) || (kinds_changed && w.is_some())
            });
            drop(pods);
            if let (true, Some(wanted)) = (changed, wanted) {
                self.reannotate(&uid, wanted);
            }
            self.reconcile_names(&uid);
            // kubelet's pod sync after a container start triggers the readiness worker at once.
            for name in started {
                self.trigger(&uid, &name, ProbeType::Readiness);
            }
            return;
        }
        let Some(annotation) = effective_annotation(&pod).map(str::to_owned) else {
            drop(pods);
            self.state.idle.lock().insert(pod.uid.clone(), pod);
            return; // not probed (yet)
        };
        self.state.idle.lock().remove(&pod.uid);
        let parsed = self.parse(&pod, &annotation);
        self.set_spec_errors(&pod, parsed.errors.len());
        let uid = pod.uid.clone();
        let shared: SharedPod = Arc::new(RwLock::new(Arc::new(pod)));
        pods.insert(
            uid.clone(),
            PodEntry {
                shared: shared.clone(),
                spec_errors: parsed.errors.clone(),
                has_startup: startup_names(&parsed),
                annotation,
                probes: parsed.containers.clone(),
                unknown: unknown::Unknown::default(),
            },
        );
        drop(pods);
        for (name, probes) in &parsed.containers {
            self.spawn_workers(&uid, name, probes, &shared);
        }
        self.reconcile_names(&uid);
    }

    /// Starts the workers of container `name` of pod `uid` (those not already running).
    fn spawn_workers(&self, uid: &str, name: &str, probes: &ContainerProbes, shared: &SharedPod) {
        let mut workers = self.state.workers.lock();
        for (key, spec, has_startup) in container_worker_specs(uid, name, probes.clone()) {
            if !workers.contains_key(&key) {
                self.spawn(&mut workers, key, spec, has_startup, shared);
            }
        }
    }

    /// Takes the Kubernetes API's view of a pod (the reflector's): its annotation wins over
    /// CRI's, its restart policy, phase, deletion and preStop hooks reach the workers and the
    /// kill path.
    pub fn set_api_pod(&self, api: ApiPod) {
        let uid = api.uid.clone();
        let api = Arc::new(api);
        self.state.api.lock().insert(uid.clone(), api.clone());
        let current = {
            let pods = self.state.pods.lock();
            pods.get(&uid).map(|e| PodInfo::clone(&e.shared.read()))
        };
        let idle = self.state.idle.lock().get(&uid).cloned();
        if let Some(pod) = current.or(idle) {
            self.update_pod(pod);
        }
    }

    /// Forgets the API's view of pod `uid` (deleted, or gone from a relist). Its workers keep
    /// running until CRI says the pod is gone, with the specs they have.
    pub fn remove_api_pod(&self, uid: &str) {
        if self.state.api.lock().remove(uid).is_none() {
            return;
        }
        if let Some(e) = self.state.pods.lock().get(uid) {
            let mut cur = e.shared.write();
            let mut pod = PodInfo::clone(&cur);
            pod.api = None;
            *cur = Arc::new(pod);
        }
    }

    /// Number of pods the API shows on this node.
    pub fn api_pod_count(&self) -> usize {
        self.state.api.lock().len()
    }

    /// UIDs of the pods the API shows on this node.
    pub fn api_pod_uids(&self) -> Vec<String> {
        self.state.api.lock().keys().cloned().collect()
    }

    /// The annotation of pod `uid` became `annotation` (through the API): start, update or stop
    /// workers so that they match it.
    fn reannotate(&self, uid: &str, annotation: Option<String>) {
        let Some(annotation) = annotation else {
            // No probes any more: stop them all, keep the pod as an idle one.
            let pod = self
                .state
                .pods
                .lock()
                .get(uid)
                .map(|e| PodInfo::clone(&e.shared.read()));
            self.remove_pod(uid);
            if let Some(pod) = pod {
                self.state.idle.lock().insert(uid.to_owned(), pod);
            }
            return;
        };
        let mut pods = self.state.pods.lock();
        let Some(entry) = pods.get_mut(uid) else {
            return;
        };
        let shared = entry.shared.clone();
        let pod = shared.read().clone();
        let parsed = self.parse(&pod, &annotation);
        tracing::info!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
            "the podward.io/probes annotation changed; applying it to the running pod");
        entry.spec_errors = parsed.errors.clone();
        entry.has_startup = startup_names(&parsed);
        entry.annotation = annotation;
        entry.probes = parsed.containers.clone();
        // A name the new annotation drops is no longer an error; one it keeps stays unknown
        // (no worker) until its container appears.
        let probes = &entry.probes;
        entry.unknown.names.retain(|n| probes.contains_key(n));
        let unknown = entry.unknown.names.clone();
        self.set_spec_errors(&pod, entry.spec_errors.len() + unknown.len());
        drop(pods);
        let wanted: BTreeMap<WorkerKey, (Arc<ProbeSpec>, bool)> = worker_specs(uid, parsed)
            .into_iter()
            .filter(|(k, _, _)| !unknown.contains(&k.container))
            .map(|(k, spec, hs)| (k, (Arc::new(spec), hs)))
            .collect();
        let mut workers = self.state.workers.lock();
        let existing: Vec<WorkerKey> = workers
            .keys()
            .filter(|k| k.pod_uid == uid)
            .cloned()
            .collect();
        for key in existing {
            match wanted.get(&key) {
                None => self.state.stop_worker(&mut workers, &key),
                Some((spec, hs)) => {
                    if let Some(w) = workers.get_mut(&key)
                        && (w.spec != *spec || w.has_startup != *hs)
                    {
                        w.spec = spec.clone();
                        w.has_startup = *hs;
                        w.ctl.update(SpecUpdate {
                            spec: spec.clone(),
                            has_startup: *hs,
                        });
                    }
                }
            }
        }
        for (key, (spec, hs)) in wanted {
            if !workers.contains_key(&key) {
                self.spawn(&mut workers, key, ProbeSpec::clone(&spec), hs, &shared);
            }
        }
    }

    /// The pod's annotation parsed; with the API's view, probes of plain init containers and of
    /// ephemeral containers are refused as the API server refuses them in a pod spec.
    fn parse(&self, pod: &PodInfo, annotation: &str) -> PodProbes {
        let mut parsed = parse_pod_probes(annotation);
        if let Some(p) = self.state.host_policy.get() {
            let host_network = pod.ip.is_some_and(|ip| p.host_network(ip));
            p.policy().deny_hosts(&mut parsed, host_network);
        }
        if let Some(api) = &pod.api {
            let refused: Vec<(String, ContainerKind)> = parsed
                .containers
                .keys()
                .filter_map(|n| {
                    api.container(n)
                        .filter(|c| {
                            matches!(c.kind, ContainerKind::Init | ContainerKind::Ephemeral)
                        })
                        .map(|c| (n.clone(), c.kind))
                })
                .collect();
            for (name, kind) in refused {
                parsed.containers.remove(&name);
                let message = if kind == ContainerKind::Init {
                    "Forbidden: probes may not be set for init containers without \
                     restartPolicy=Always"
                } else {
                    "Forbidden: cannot be set for an Ephemeral Container"
                };
                parsed.errors.push(SpecError {
                    container: name,
                    field: String::new(),
                    message: message.to_owned(),
                });
            }
        }
        let invalid = parsed.errors.len();
        if let Some(api) = &pod.api {
            conflicts::apply(
                &mut parsed,
                pod,
                api,
                &self.state.events,
                self.state.clock.now_ns(),
            );
        }
        for e in &parsed.errors[..invalid] {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                container = %e.container, field = %e.field, error = %e.message,
                "invalid probe in the podward.io/probes annotation; this probe is not run");
        }
        parsed
    }

    /// Sets the pod's `podward_prober_spec_errors` gauge to `n` errors.
    fn set_spec_errors(&self, pod: &PodInfo, n: usize) {
        self.state
            .metrics
            .spec_errors
            .with_label_values(&[&pod.name, &pod.namespace, &pod.uid])
            .set(n as f64);
    }

    fn spawn(
        &self,
        workers: &mut BTreeMap<WorkerKey, WorkerEntry>,
        key: WorkerKey,
        spec: ProbeSpec,
        has_startup: bool,
        shared: &SharedPod,
    ) {
        let ty = key.ty;
        let spec = Arc::new(spec);
        let w = Worker::new(
            key.clone(),
            spec.clone(),
            has_startup,
            shared.clone(),
            self.ctx.clone(),
        );
        workers.insert(
            key,
            WorkerEntry {
                ctl: w.ctl(),
                status: w.status(),
                spec,
                has_startup,
            },
        );
        self.state
            .metrics
            .workers
            .with_label_values(&[ty.name()])
            .inc();
        tokio::spawn(w.run());
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`). Idempotent.
    pub fn remove_pod(&self, uid: &str) -> bool {
        self.state.idle.lock().remove(uid);
        let Some(entry) = self.state.pods.lock().remove(uid) else {
            return false;
        };
        let mut workers = self.state.workers.lock();
        let keys: Vec<WorkerKey> = workers
            .keys()
            .filter(|k| k.pod_uid == uid)
            .cloned()
            .collect();
        for k in keys {
            self.state.stop_worker(&mut workers, &k);
        }
        drop(workers);
        let p = entry.shared.read();
        let _ =
            self.state
                .metrics
                .spec_errors
                .remove_label_values(&[&p.name, &p.namespace, &p.uid]);
        self.state.killer.forget_pod(uid);
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
        for uid in self.pod_uids() {
            self.remove_pod(&uid);
        }
    }

    fn trigger(&self, uid: &str, container: &str, ty: ProbeType) {
        let key = WorkerKey {
            pod_uid: uid.to_owned(),
            container: container.to_owned(),
            ty,
        };
        if let Some(w) = self.state.workers.lock().get(&key) {
            w.ctl.trigger();
        }
    }
}

/// Names of containers whose current instance is running in `new` but was not (or was another
/// instance) in `old`.
fn newly_running(old: &PodInfo, new: &PodInfo) -> Vec<String> {
    let names: HashSet<&str> = new.containers.values().map(|c| c.name.as_str()).collect();
    names
        .into_iter()
        .filter(|n| {
            let now = new.current(n).filter(|c| c.state == RunState::Running);
            let before = old.current(n).filter(|c| c.state == RunState::Running);
            matches!((now, before), (Some(a), b) if b.map(|b| &b.id) != Some(&a.id))
        })
        .map(str::to_owned)
        .collect()
}

/// What of the API's view the annotation's parse depends on besides the annotation: the
/// containers' kinds (init and ephemeral ones are never probed), the probe types their spec
/// declares (kubelet runs those) and whether the pod is gated.
type ParseFacts<'a> = Option<(Vec<(&'a str, ContainerKind, &'a [ProbeType])>, bool)>;

fn parse_facts(pod: &PodInfo) -> ParseFacts<'_> {
    pod.api.as_ref().map(|a| {
        let containers = a
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind, c.spec_probes.as_slice()))
            .collect();
        (containers, a.gated)
    })
}

/// The annotation that decides a pod's probes: the API's copy when the prober has the pod's API
/// view (annotations are mutable; CRI's copy is frozen at sandbox creation), else CRI's.
fn effective_annotation(pod: &PodInfo) -> Option<&str> {
    match &pod.api {
        Some(api) => api.probes_annotation.as_deref(),
        None => pod.probes_annotation.as_deref(),
    }
}

fn startup_names(parsed: &PodProbes) -> HashSet<String> {
    parsed
        .containers
        .iter()
        .filter(|(_, c)| c.startup.is_some())
        .map(|(n, _)| n.clone())
        .collect()
}

/// Every worker a parsed annotation asks for: key, spec, and whether its container has a
/// startup probe.
fn worker_specs(uid: &str, parsed: PodProbes) -> Vec<(WorkerKey, ProbeSpec, bool)> {
    parsed
        .containers
        .into_iter()
        .flat_map(|(name, probes)| container_worker_specs(uid, &name, probes))
        .collect()
}

/// The workers of one container's probes: key, spec, and whether it has a startup probe.
fn container_worker_specs(
    uid: &str,
    name: &str,
    probes: ContainerProbes,
) -> Vec<(WorkerKey, ProbeSpec, bool)> {
    let has_startup = probes.startup.is_some();
    [
        (ProbeType::Startup, probes.startup),
        (ProbeType::Readiness, probes.readiness),
        (ProbeType::Liveness, probes.liveness),
    ]
    .into_iter()
    .filter_map(|(ty, spec)| {
        let key = WorkerKey {
            pod_uid: uid.to_owned(),
            container: name.to_owned(),
            ty,
        };
        spec.map(|spec| (key, spec, has_startup))
    })
    .collect()
}

/// The manager side of [`Sink`]; weak so workers do not keep the manager alive.
struct ManagerSink {
    state: Weak<State>,
}

impl Sink for ManagerSink {
    fn changed(
        &self,
        key: &WorkerKey,
        pod: &PodInfo,
        c: &ContainerInfo,
        result: ProbeResult,
        output: &str,
    ) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        tracing::info!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
            container_id = %c.id, probe = key.ty.name(), result = ?result, "probe result changed");
        let output = capped(output).to_owned();
        let at_ns = state.clock.now_ns();
        state
            .events
            .publish(Event::result(pod, c, key.ty, result, output, at_ns));
    }

    fn threshold_failure(
        &self,
        key: &WorkerKey,
        pod: &PodInfo,
        c: &ContainerInfo,
        spec: &ProbeSpec,
        output: &str,
    ) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        // A probe in flight when its pod was removed must not kill (nor count a kill in a series
        // `remove_pod` already deleted): checked and killed under the pods lock, so a removal
        // comes either before (no kill) or after (it forgets this one too).
        let pods = state.pods.lock();
        if pods.contains_key(&pod.uid) {
            state.killer.kill(pod, c, key.ty, spec, output);
        }
    }

    fn probed(&self, key: &WorkerKey, pod: &PodInfo, c: &ContainerInfo, probed: Probed) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let at_ns = state.clock.now_ns();
        state
            .events
            .publish(Event::probed(pod, c, key.ty, probed, at_ns));
    }

    fn started(&self, key: &WorkerKey) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let rkey = WorkerKey {
            ty: ProbeType::Readiness,
            ..key.clone()
        };
        if let Some(w) = state.workers.lock().get(&rkey) {
            w.ctl.trigger();
        }
    }

    fn exited(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut workers = state.workers.lock();
        if workers.get(key).is_some_and(|w| Arc::ptr_eq(&w.ctl, ctl)) {
            workers.remove(key);
            state
                .metrics
                .workers
                .with_label_values(&[key.ty.name()])
                .dec();
        }
    }
}
