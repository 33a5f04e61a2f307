//! Names in `podward.io/probes` that no container of the pod has: a spec error, not a worker.
//!
//! CRI never says which containers a pod *will* have (kubelet creates them one sync at a time:
//! init containers one after another, then the others), so a name is only called unknown once
//! the pod has containers, one of them is running, and no new container has appeared for
//! [`UNKNOWN_CONTAINER_GRACE`]. Then its workers stop, and the pod's spec errors (log, the
//! `podward_prober_spec_errors` gauge, `Status`) name it. If a container of that name appears
//! later (an init container ran longer than the grace), the error goes and its workers start.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use super::{Inner, Manager};
use crate::model::{PodInfo, RunState};
use crate::probing::worker::handle::WorkerKey;
use crate::registry::{PodEntry, UNKNOWN_CONTAINER_GRACE, unknown_name_error};

fn has_running(pod: &PodInfo) -> bool {
    pod.containers
        .values()
        .any(|c| c.state == RunState::Running)
}

impl Manager {
    /// After a pod's containers changed: names that now have a container get their workers
    /// back, and a check is scheduled while some name has none.
    pub(super) fn reconcile_names(&self, uid: &str) {
        let mut back = Vec::new();
        let mut schedule = false;
        {
            let mut pods = self.inner.registry.pods.lock();
            let Some(entry) = pods.get_mut(uid) else {
                return;
            };
            let pod = entry.shared.read().clone();
            let names: BTreeSet<String> = pod.containers.values().map(|c| c.name.clone()).collect();
            let u = &mut entry.unknown;
            if names.iter().any(|n| !u.seen.contains(n)) {
                u.last_new = Some(Instant::now());
                u.seen.extend(names.iter().cloned());
            }
            for n in u.names.clone() {
                if names.contains(&n) {
                    u.names.remove(&n);
                    if let Some(p) = entry.probes.get(&n) {
                        back.push((n, p.clone()));
                    }
                }
            }
            let missing = entry
                .probes
                .keys()
                .any(|n| !names.contains(n) && !u.names.contains(n));
            if missing && has_running(&pod) && !u.scheduled {
                u.scheduled = true;
                schedule = true;
            }
            if !back.is_empty() {
                self.inner.set_spec_errors(&pod, entry_errors(entry));
            }
        }
        if !back.is_empty() {
            let shared = self
                .inner
                .registry
                .pods
                .lock()
                .get(uid)
                .map(|e| e.shared.clone());
            if let Some(shared) = shared {
                for (name, probes) in &back {
                    tracing::info!(pod_uid = %uid, container = %name,
                        "container named in podward.io/probes appeared; its probes start");
                    self.spawn_workers(uid, name, probes, &shared);
                }
            }
        }
        if schedule {
            tokio::spawn(check(Arc::downgrade(&self.inner), uid.to_owned()));
        }
    }
}

fn entry_errors(entry: &PodEntry) -> usize {
    entry.spec_errors.len() + entry.unknown.names.len()
}

/// Waits out the grace from the last new container, then reports the names still missing.
async fn check(state: Weak<Inner>, uid: String) {
    loop {
        let due = {
            let Some(state) = state.upgrade() else { return };
            let pods = state.registry.pods.lock();
            let Some(entry) = pods.get(&uid) else { return };
            entry.unknown.last_new.unwrap_or_else(Instant::now) + UNKNOWN_CONTAINER_GRACE
        };
        tokio::time::sleep_until(due).await;
        let Some(state) = state.upgrade() else { return };
        let stale = {
            let pods = state.registry.pods.lock();
            let Some(entry) = pods.get(&uid) else { return };
            entry
                .unknown
                .last_new
                .is_some_and(|t| t + UNKNOWN_CONTAINER_GRACE > Instant::now())
        };
        if !stale {
            flag(&state, &uid);
            return;
        }
    }
}

/// Reports every name of the annotation that no container of the pod has, and stops its
/// workers.
fn flag(state: &Inner, uid: &str) {
    let mut stop = Vec::new();
    {
        let mut pods = state.registry.pods.lock();
        let Some(entry) = pods.get_mut(uid) else {
            return;
        };
        entry.unknown.scheduled = false;
        let pod = entry.shared.read().clone();
        for name in entry.probes.keys() {
            if pod.current(name).is_none() && entry.unknown.names.insert(name.clone()) {
                tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                    container = %name, error = %unknown_name_error(name).message,
                    "podward.io/probes names a container this pod does not have");
                stop.push(name.clone());
            }
        }
        state.set_spec_errors(&pod, entry_errors(entry));
    }
    let mut workers = state.registry.workers.lock();
    let keys: Vec<WorkerKey> = workers
        .keys()
        .filter(|k| k.pod_uid == uid && stop.contains(&k.container))
        .cloned()
        .collect();
    for k in keys {
        state.stop_worker(&mut workers, &k);
    }
}
