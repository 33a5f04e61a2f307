//! kubelet's probe manager: it tracks pods and their workers. Workers per (pod, container, probe
//! type) appear when a pod with a `podward.io/probes` annotation appears and go with it; what a
//! worker reports goes on as an event (result changes), to the kill path (failures at threshold)
//! or back to a worker (readiness trigger after startup).
//!
//! Like kubelet, adding a pod is idempotent and later spec changes of a known pod are ignored
//! (a worker key that exists is skipped *per key*, not for the rest of the pod: kubelet's
//! early `return` there is a known bug, kubernetes#139888).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::clock::Clock;
use crate::event::{Event, Events};
use crate::handler::output::capped;
use crate::kill::Killer;
use crate::metrics::Metrics;
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::results::{ProbeResult, Results};
use crate::runner::ProbeRunner;
use crate::spec::{ProbeSpec, ProbeType, SpecError, parse_pod_probes};
use crate::worker::handle::{WorkerCtl, WorkerKey, WorkerStatus};
use crate::worker::{Ctx, SharedPod, Sink, Worker};

mod status;

/// A probed pod.
struct PodEntry {
    shared: SharedPod,
    spec_errors: Vec<SpecError>,
    /// Container names with a startup probe (they gate liveness and readiness).
    has_startup: HashSet<String>,
}

/// A running worker.
struct WorkerEntry {
    ctl: Arc<WorkerCtl>,
    status: Arc<Mutex<WorkerStatus>>,
}

struct State {
    pods: Mutex<HashMap<String, PodEntry>>,
    workers: Mutex<BTreeMap<WorkerKey, WorkerEntry>>,
    killer: Killer,
    events: Events,
    metrics: Arc<Metrics>,
    clock: Clock,
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
            workers: Mutex::new(BTreeMap::new()),
            killer,
            events,
            metrics: metrics.clone(),
            clock,
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
        });
        Self { state, ctx }
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
        let gone: Vec<String> = self
            .state
            .pods
            .lock()
            .keys()
            .filter(|u| !keep.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            self.remove_pod(&uid);
        }
        for p in pods {
            self.update_pod(p);
        }
    }

    /// Adds a pod or refreshes its containers and fields (probe specs of a known pod are kept).
    pub fn update_pod(&self, pod: PodInfo) {
        let mut pods = self.state.pods.lock();
        if let Some(entry) = pods.get(&pod.uid) {
            let started = {
                let mut cur = entry.shared.write();
                let started = newly_running(&cur, &pod);
                *cur = Arc::new(pod);
                started
            };
            let uid = entry.shared.read().uid.clone();
            drop(pods);
            // kubelet's pod sync after a container start triggers the readiness worker at once.
            for name in started {
                self.trigger(&uid, &name, ProbeType::Readiness);
            }
            return;
        }
        let Some(annotation) = pod.probes_annotation.clone() else {
            return; // not probed
        };
        let parsed = parse_pod_probes(&annotation);
        for e in &parsed.errors {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                container = %e.container, field = %e.field, error = %e.message,
                "invalid probe in the podward.io/probes annotation; this probe is not run");
        }
        self.state
            .metrics
            .spec_errors
            .with_label_values(&[&pod.name, &pod.namespace, &pod.uid])
            .set(parsed.errors.len() as f64);
        let uid = pod.uid.clone();
        let shared: SharedPod = Arc::new(RwLock::new(Arc::new(pod)));
        let has_startup: HashSet<String> = parsed
            .containers
            .iter()
            .filter(|(_, c)| c.startup.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        pods.insert(
            uid.clone(),
            PodEntry {
                shared: shared.clone(),
                spec_errors: parsed.errors.clone(),
                has_startup,
            },
        );
        drop(pods);
        let mut workers = self.state.workers.lock();
        for (name, probes) in parsed.containers {
            let specs = [
                (ProbeType::Startup, probes.startup),
                (ProbeType::Readiness, probes.readiness),
                (ProbeType::Liveness, probes.liveness),
            ];
            let has_startup = specs[0].1.is_some();
            for (ty, spec) in specs {
                let Some(spec) = spec else { continue };
                let key = WorkerKey {
                    pod_uid: uid.clone(),
                    container: name.clone(),
                    ty,
                };
                if workers.contains_key(&key) {
                    continue;
                }
                let w = Worker::new(
                    key.clone(),
                    Arc::new(spec),
                    has_startup,
                    shared.clone(),
                    self.ctx.clone(),
                );
                workers.insert(
                    key,
                    WorkerEntry {
                        ctl: w.ctl(),
                        status: w.status(),
                    },
                );
                self.state
                    .metrics
                    .workers
                    .with_label_values(&[ty.name()])
                    .inc();
                tokio::spawn(w.run());
            }
        }
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`). Idempotent.
    pub fn remove_pod(&self, uid: &str) -> bool {
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
            if let Some(w) = workers.remove(&k) {
                w.ctl.stop();
                self.state
                    .metrics
                    .workers
                    .with_label_values(&[k.ty.name()])
                    .dec();
            }
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
