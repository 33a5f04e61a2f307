//! The pods the prober follows and the workers that probe them, in one [`PodTable`] whose
//! methods are the only way in: the [`crate::pods::manager`] upserts and removes pods, sets
//! their API view and brings their workers to what it wants; the [`crate::pods::view`] reads
//! snapshots to answer the readiness gate and `Status`. Keeping it apart from the manager is
//! what lets the read side depend on it without depending on the manager.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::model::PodInfo;
use crate::model::api_pod::ApiPod;
use crate::probing::worker::SharedPod;
use crate::probing::worker::handle::{PublishedStatus, SpecUpdate, WorkerCtl, WorkerKey};
use crate::spec::{ContainerProbes, ProbeSpec, ProbeType, SpecError, StartupGating};

/// How long a pod with a running container may go without a new container before the names of
/// its annotation that no container has are reported (kubelet starts a pod's app containers in
/// one sync, so once they run, a name still missing is a typo or a removed container).
pub const UNKNOWN_CONTAINER_GRACE: Duration = Duration::from_secs(60);

/// A probed pod.
pub(crate) struct PodEntry {
    /// The pod as its workers see it.
    pub(crate) shared: SharedPod,
    /// The annotation's errors (invalid, refused or deferred probes).
    pub(crate) spec_errors: Vec<SpecError>,
    /// How many of `spec_errors` (the first ones) make the annotation invalid: what the API
    /// server would refuse or this node refuses to run, not findings on valid probes.
    pub(crate) invalid: usize,
    /// Whether each container's startup probe gates its liveness and readiness.
    pub(crate) startup: BTreeMap<String, StartupGating>,
    /// The annotation text the workers were built from.
    pub(crate) annotation: String,
    /// The annotation's probes per container name, for the names the pod has or may still get
    /// (an unknown name's probes are not kept: they are parsed again if its container appears).
    pub(crate) probes: BTreeMap<String, ContainerProbes>,
    /// Names of the annotation with no such container in the pod: spec errors, no workers.
    pub(crate) unknown: UnknownNames,
    /// Workers that ended on their own (their container will not run again, or their pod
    /// finished): not wanted again until the annotation changes or their container's name
    /// waits for a container again.
    pub(crate) ended: BTreeSet<WorkerKey>,
}

impl PodEntry {
    /// The errors that make the annotation invalid (unknown names included): each one holds a
    /// gated pod not ready.
    pub(crate) fn invalid_errors(&self) -> Vec<SpecError> {
        self.spec_errors[..self.invalid.min(self.spec_errors.len())]
            .iter()
            .cloned()
            .chain(self.unknown.errors())
            .collect()
    }

    /// Every spec error of the pod: the annotation's and one per unknown name.
    pub(crate) fn all_errors(&self) -> Vec<SpecError> {
        self.spec_errors
            .iter()
            .cloned()
            .chain(self.unknown.errors())
            .collect()
    }
}

/// A running worker.
#[derive(Clone)]
pub(crate) struct WorkerEntry {
    /// Its control handle (stop, trigger, spec update).
    pub(crate) ctl: Arc<WorkerCtl>,
    /// The status it publishes, as `Status` reports it.
    pub(crate) status: PublishedStatus,
    /// The spec it runs (compared when the annotation changes).
    pub(crate) spec: Arc<ProbeSpec>,
    /// Whether its container's startup probe gates it.
    pub(crate) startup: StartupGating,
}

/// A pod's annotation names that no container of the pod has (`crate::pods::manager`'s unknown-name
/// check finds them: at once when the API's pod spec lacks them, else after
/// [`UNKNOWN_CONTAINER_GRACE`]).
#[derive(Debug, Default)]
pub(crate) struct UnknownNames {
    /// Names reported unknown (no workers, no probes kept).
    pub(crate) names: BTreeSet<String>,
    /// Names of `probes` whose workers wait for the pod to have such a container (in CRI, or in
    /// the API's pod spec): a name gets workers only once the pod has it.
    pub(crate) pending: BTreeSet<String>,
    /// When a container name first appeared in the pod last (the grace runs from there).
    pub(crate) last_new: Option<Instant>,
    /// Names of containers seen so far.
    pub(crate) seen: BTreeSet<String>,
    /// Whether a check task is waiting.
    pub(crate) scheduled: bool,
}

impl UnknownNames {
    /// The spec error of each unknown name.
    pub(crate) fn errors(&self) -> impl Iterator<Item = SpecError> + '_ {
        self.names.iter().map(|n| unknown_name_error(n))
    }
}

/// The spec error of annotation name `name` that no container of the pod has.
pub(crate) fn unknown_name_error(name: &str) -> SpecError {
    SpecError {
        container: name.to_owned(),
        field: String::new(),
        message: format!(
            "no container named {name:?} in this pod (not in its spec, or none appeared within \
             {}s of its containers running); its probes are not run",
            UNKNOWN_CONTAINER_GRACE.as_secs()
        ),
    }
}

/// Pods and workers, each map under its own lock.
///
/// Invariants: a UID is in at most one of the probed and the idle pods; a worker's pod is probed
/// when the worker is inserted (workers start only in [`PodTable::reconcile`], under the pods
/// lock, and a removal takes the pod's workers with it). Lock order, kept
/// inside the table: `pods` before `idle` and before `workers`; `api` is never held with another.
/// The closures the methods take run under a lock and must not call back into the table.
#[derive(Default)]
pub struct PodTable {
    /// Probed pods by UID.
    pods: Mutex<HashMap<String, PodEntry>>,
    /// Pods without probes, as the source last showed them: an annotation added later through
    /// the API starts probing them.
    idle: Mutex<HashMap<String, PodInfo>>,
    /// What the Kubernetes API says of each pod on the node (the reflector's view).
    api: Mutex<HashMap<String, Arc<ApiPod>>>,
    /// Running workers, ordered so that a pod's workers are one range.
    workers: Mutex<BTreeMap<WorkerKey, WorkerEntry>>,
}

/// A pod met for the first time, as the manager takes it.
pub(crate) enum NewPod {
    /// Probed: its entry.
    Probed(Box<PodEntry>),
    /// Without probes: kept idle.
    Idle(PodInfo),
}

/// What [`PodTable::upsert`] did with a pod.
pub(crate) enum Upsert<R> {
    /// The pod was probed already: what the refresh returned.
    Known(R),
    /// The pod is probed from now on.
    Added,
    /// The pod has no probes: kept as an idle pod.
    Idle,
}

/// A worker of the wanted set: its spec and its startup gating.
pub(crate) type Wanted = BTreeMap<WorkerKey, (Arc<ProbeSpec>, StartupGating)>;

impl PodTable {
    /// Number of running workers.
    pub fn worker_count(&self) -> usize {
        self.workers.lock().len()
    }

    /// UIDs of the pods the manager follows.
    pub fn pod_uids(&self) -> Vec<String> {
        self.pods.lock().keys().cloned().collect()
    }

    /// Number of pods the API shows on this node.
    pub fn api_pod_count(&self) -> usize {
        self.api.lock().len()
    }

    /// UIDs of the pods the API shows on this node.
    pub fn api_pod_uids(&self) -> Vec<String> {
        self.api.lock().keys().cloned().collect()
    }

    /// UIDs of the pods, probed or idle, that `keep` does not hold.
    pub(crate) fn uids_not_in(&self, keep: &HashSet<String>) -> Vec<String> {
        let mut gone: Vec<String> = self
            .pods
            .lock()
            .keys()
            .filter(|u| !keep.contains(*u))
            .cloned()
            .collect();
        gone.extend(
            self.idle
                .lock()
                .keys()
                .filter(|u| !keep.contains(*u))
                .cloned(),
        );
        gone
    }

    /// Adds or refreshes `pod`, as one step: two sources telling of one new pod at once make one
    /// entry (the first one's workers would otherwise follow a pod nobody updates). A probed pod
    /// goes to `known`; another to `new`, which makes its entry or hands the pod back to be kept
    /// idle ([`NewPod`]).
    pub(crate) fn upsert<R>(
        &self,
        pod: PodInfo,
        known: impl FnOnce(&PodEntry, PodInfo) -> R,
        new: impl FnOnce(PodInfo) -> NewPod,
    ) -> Upsert<R> {
        let mut pods = self.pods.lock();
        if let Some(entry) = pods.get(&pod.uid) {
            return Upsert::Known(known(entry, pod));
        }
        let uid = pod.uid.clone();
        match new(pod) {
            NewPod::Probed(entry) => {
                self.idle.lock().remove(&uid);
                pods.insert(uid, *entry);
                Upsert::Added
            }
            NewPod::Idle(pod) => {
                self.idle.lock().insert(uid, pod);
                Upsert::Idle
            }
        }
    }

    /// Keeps `pod` as an idle pod (its probes went away).
    pub(crate) fn set_idle(&self, pod: PodInfo) {
        let pods = self.pods.lock();
        if !pods.contains_key(&pod.uid) {
            self.idle.lock().insert(pod.uid.clone(), pod);
        }
    }

    /// Pod `uid` as the table has it: the probed pod's current view, or the idle pod.
    pub(crate) fn pod(&self, uid: &str) -> Option<PodInfo> {
        let pods = self.pods.lock();
        if let Some(e) = pods.get(uid) {
            return Some(PodInfo::clone(&e.shared.read()));
        }
        self.idle.lock().get(uid).cloned()
    }

    /// Sets the API's view of a pod; whether it is the first one for its UID.
    pub(crate) fn set_api(&self, api: Arc<ApiPod>) -> bool {
        self.api.lock().insert(api.uid.clone(), api).is_none()
    }

    /// The API's view of pod `uid`.
    pub(crate) fn api(&self, uid: &str) -> Option<Arc<ApiPod>> {
        self.api.lock().get(uid).cloned()
    }

    /// Forgets the API's view of pod `uid`, in the table and in the probed pod's current view;
    /// whether there was one.
    pub(crate) fn clear_api(&self, uid: &str) -> bool {
        if self.api.lock().remove(uid).is_none() {
            return false;
        }
        if let Some(e) = self.pods.lock().get(uid) {
            let mut cur = e.shared.write();
            let mut pod = PodInfo::clone(&cur);
            pod.api = None;
            *cur = Arc::new(pod);
        }
        true
    }

    /// `f` on probed pod `uid`'s entry, if the pod is probed.
    pub(crate) fn entry<R>(&self, uid: &str, f: impl FnOnce(&mut PodEntry) -> R) -> Option<R> {
        self.pods.lock().get_mut(uid).map(f)
    }

    /// `f` on every probed pod's entry (only `uid`'s, when given).
    pub(crate) fn entries<R>(&self, uid: Option<&str>, f: impl FnMut(&PodEntry) -> R) -> Vec<R> {
        self.pods
            .lock()
            .iter()
            .filter(|(u, _)| uid.is_none_or(|w| w == u.as_str()))
            .map(|(_, e)| e)
            .map(f)
            .collect()
    }

    /// Runs `f` while pod `uid` is probed, and only then: a removal of the pod comes either
    /// before `f` (which does not run) or after it.
    pub(crate) fn while_probed(&self, uid: &str, f: impl FnOnce()) {
        let pods = self.pods.lock();
        if pods.contains_key(uid) {
            f();
        }
    }

    /// Forgets pod `uid` (probed or idle); the probed pod's entry and the workers taken out
    /// with it (the caller stops them).
    pub(crate) fn remove(&self, uid: &str) -> Option<(PodEntry, Vec<(WorkerKey, WorkerEntry)>)> {
        self.idle.lock().remove(uid);
        let entry = self.pods.lock().remove(uid)?;
        let mut workers = self.workers.lock();
        let keys: Vec<WorkerKey> = pod_workers(&workers, uid).map(|(k, _)| k.clone()).collect();
        let taken = keys
            .into_iter()
            .filter_map(|k| workers.remove(&k).map(|w| (k, w)))
            .collect();
        Some((entry, taken))
    }

    /// Worker `key` ended on its own: takes it out if it is the one `ctl` controls (an exited
    /// worker whose key a newer worker may hold already) and marks it ended in its pod's entry,
    /// so that the pod's wanted workers leave it out; whether it was.
    pub(crate) fn remove_worker(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>) -> bool {
        let mut pods = self.pods.lock();
        let mut workers = self.workers.lock();
        if !workers.get(key).is_some_and(|w| Arc::ptr_eq(&w.ctl, ctl)) {
            return false;
        }
        workers.remove(key);
        if let Some(entry) = pods.get_mut(&key.pod_uid) {
            entry.ended.insert(key.clone());
        }
        true
    }

    /// Brings probed pod `uid`'s running workers to the set `decide` wants of its entry, as one
    /// step of the table: a pod removed meanwhile gets no worker. See
    /// [`PodTable::reconcile_workers`]; `spawn` also gets the pod's live view.
    pub(crate) fn reconcile(
        &self,
        uid: &str,
        decide: impl FnOnce(&PodEntry) -> Wanted,
        mut spawn: impl FnMut(&SharedPod, WorkerKey, ProbeSpec, StartupGating) -> WorkerEntry,
    ) -> Vec<(WorkerKey, WorkerEntry)> {
        let pods = self.pods.lock();
        let Some(entry) = pods.get(uid) else {
            return Vec::new();
        };
        let wanted = decide(entry);
        let shared = &entry.shared;
        self.reconcile_workers(uid, wanted, |key, spec, startup| {
            spawn(shared, key, spec, startup)
        })
    }

    /// Brings pod `uid`'s running workers to `wanted`: those whose spec or startup gating
    /// changed get the new one in place (counters restart, the published result stays), missing
    /// ones start through `spawn`; the others are taken out and returned (the caller stops
    /// them).
    fn reconcile_workers(
        &self,
        uid: &str,
        wanted: Wanted,
        mut spawn: impl FnMut(WorkerKey, ProbeSpec, StartupGating) -> WorkerEntry,
    ) -> Vec<(WorkerKey, WorkerEntry)> {
        let mut workers = self.workers.lock();
        let running: Vec<WorkerKey> = pod_workers(&workers, uid).map(|(k, _)| k.clone()).collect();
        let mut unwanted = Vec::new();
        for key in running {
            match wanted.get(&key) {
                None => {
                    if let Some(w) = workers.remove(&key) {
                        unwanted.push((key, w));
                    }
                }
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
            if let Entry::Vacant(slot) = workers.entry(key) {
                let key = slot.key().clone();
                slot.insert(spawn(key, ProbeSpec::clone(&spec), startup));
            }
        }
        unwanted
    }

    /// Triggers worker (`uid`, `container`, `ty`) if it runs.
    pub(crate) fn trigger(&self, uid: &str, container: &str, ty: ProbeType) {
        let workers = self.workers.lock();
        if let Some(w) = worker(&workers, uid, container, ty) {
            w.ctl.trigger();
        }
    }

    /// A snapshot of pod `uid`'s workers, by container name then probe type.
    pub(crate) fn workers_of(&self, uid: &str) -> PodWorkers {
        let workers = self.workers.lock();
        PodWorkers(
            pod_workers(&workers, uid)
                .map(|(k, w)| ((k.container.clone(), k.ty), w.clone()))
                .collect(),
        )
    }
}

/// A snapshot of one pod's workers (their status handles still live).
pub(crate) struct PodWorkers(BTreeMap<(String, ProbeType), WorkerEntry>);

impl PodWorkers {
    /// The workers, by container name then probe type.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, ProbeType, &WorkerEntry)> {
        self.0.iter().map(|((c, ty), w)| (c.as_str(), *ty, w))
    }

    /// The worker for (`container`, `ty`), if it ran at the snapshot.
    pub(crate) fn get(&self, container: &str, ty: ProbeType) -> Option<&WorkerEntry> {
        self.0.get(&(container.to_owned(), ty))
    }
}

/// The workers of pod `uid` in `workers`, by container name then probe type.
fn pod_workers<'a>(
    workers: &'a BTreeMap<WorkerKey, WorkerEntry>,
    uid: &'a str,
) -> impl Iterator<Item = (&'a WorkerKey, &'a WorkerEntry)> + 'a {
    let first = WorkerKey {
        pod_uid: uid.to_owned(),
        container: String::new(),
        ty: ProbeType::Liveness,
    };
    workers
        .range(first..)
        .take_while(move |(k, _)| k.pod_uid == uid)
}

/// The worker for (`uid`, `container`, `ty`), if it runs.
fn worker<'a>(
    workers: &'a BTreeMap<WorkerKey, WorkerEntry>,
    uid: &str,
    container: &str,
    ty: ProbeType,
) -> Option<&'a WorkerEntry> {
    workers.get(&WorkerKey {
        pod_uid: uid.to_owned(),
        container: container.to_owned(),
        ty,
    })
}

#[cfg(test)]
mod tests;
