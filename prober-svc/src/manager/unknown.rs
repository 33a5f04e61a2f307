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
use std::time::Duration;

use tokio::time::Instant;

use super::{Manager, State};
use crate::model::{PodInfo, RunState};
use crate::spec::SpecError;
use crate::worker::handle::WorkerKey;

/// How long a pod with a running container may go without a new container before the names of
/// its annotation that no container has are reported (kubelet starts a pod's app containers in
/// one sync, so once they run, a name still missing is a typo or a removed container).
pub const UNKNOWN_CONTAINER_GRACE: Duration = Duration::from_secs(60);

/// A pod's unknown names and the check that finds them.
#[derive(Debug, Default)]
pub(super) struct Unknown {
    /// Names reported unknown (their workers are stopped).
    pub(super) names: BTreeSet<String>,
    /// When a container name first appeared in the pod last (the grace runs from there).
    last_new: Option<Instant>,
    /// Names of containers seen so far.
    seen: BTreeSet<String>,
    /// Whether a check task is waiting.
    scheduled: bool,
}

impl Unknown {
    /// The spec error of each unknown name.
    pub(super) fn errors(&self) -> impl Iterator<Item = SpecError> + '_ {
        self.names.iter().map(|n| error(n))
    }
}

fn error(name: &str) -> SpecError {
    SpecError {
        container: name.to_owned(),
        field: String::new(),
        message: format!(
            "no container named {name:?} in this pod (none appeared within {}s of its \
             containers running); its probes are not run",
            UNKNOWN_CONTAINER_GRACE.as_secs()
        ),
    }
}

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
            let mut pods = self.state.pods.lock();
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
                set_gauge(&self.state, entry_errors(entry), &pod);
            }
        }
        if !back.is_empty() {
            let shared = self.state.pods.lock().get(uid).map(|e| e.shared.clone());
            if let Some(shared) = shared {
                for (name, probes) in &back {
                    tracing::info!(pod_uid = %uid, container = %name,
                        "container named in podward.io/probes appeared; its probes start");
                    self.spawn_workers(uid, name, probes, &shared);
                }
            }
        }
        if schedule {
            tokio::spawn(check(Arc::downgrade(&self.state), uid.to_owned()));
        }
    }
}

fn entry_errors(entry: &super::PodEntry) -> usize {
    entry.spec_errors.len() + entry.unknown.names.len()
}

fn set_gauge(state: &State, n: usize, pod: &PodInfo) {
    state
        .metrics
        .spec_errors
        .with_label_values(&[&pod.name, &pod.namespace, &pod.uid])
        .set(n as f64);
}

/// Waits out the grace from the last new container, then reports the names still missing.
async fn check(state: Weak<State>, uid: String) {
    loop {
        let due = {
            let Some(state) = state.upgrade() else { return };
            let pods = state.pods.lock();
            let Some(entry) = pods.get(&uid) else { return };
            entry.unknown.last_new.unwrap_or_else(Instant::now) + UNKNOWN_CONTAINER_GRACE
        };
        tokio::time::sleep_until(due).await;
        let Some(state) = state.upgrade() else { return };
        let stale = {
            let pods = state.pods.lock();
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
fn flag(state: &State, uid: &str) {
    let mut stop = Vec::new();
    {
        let mut pods = state.pods.lock();
        let Some(entry) = pods.get_mut(uid) else {
            return;
        };
        entry.unknown.scheduled = false;
        let pod = entry.shared.read().clone();
        for name in entry.probes.keys() {
            if pod.current(name).is_none() && entry.unknown.names.insert(name.clone()) {
                tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                    container = %name, error = %error(name).message,
                    "podward.io/probes names a container this pod does not have");
                stop.push(name.clone());
            }
        }
        set_gauge(state, entry_errors(entry), &pod);
    }
    let mut workers = state.workers.lock();
    let keys: Vec<WorkerKey> = workers
        .keys()
        .filter(|k| k.pod_uid == uid && stop.contains(&k.container))
        .cloned()
        .collect();
    for k in keys {
        state.stop_worker(&mut workers, &k);
    }
}
