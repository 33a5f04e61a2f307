//! Names in `podward.io/probes` that no container of the pod has: a spec error, not a worker.
//!
//! A name gets workers only once the pod has it: a container of that name in CRI, or in the
//! API's pod spec when the prober has the pod's API view (kubelet's workers follow the pod
//! spec). Until then it is *pending*: its probes are kept, it gates readiness (fails closed),
//! and it has no worker.
//!
//! CRI never says which containers a pod *will* have (kubelet creates them one sync at a time:
//! init containers one after another, then the others), so without the API's view a pending
//! name is only called unknown once the pod has containers, one of them is running, and no new
//! container has appeared for [`UNKNOWN_CONTAINER_GRACE`]. With the API's view, a name its pod
//! spec lacks is unknown at once. An unknown name is reported (log, the
//! `podward_prober_spec_errors` gauge, `Status`), has no workers and its probes are not kept; if
//! a container of that name appears later (an init container ran longer than the grace), the
//! error goes, its probes are parsed again from the annotation and its workers start.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use super::{Inner, Manager};
use crate::model::{PodInfo, RunState};
use crate::pods::pod_table::{PodEntry, UNKNOWN_CONTAINER_GRACE, unknown_name_error};
use crate::spec::ContainerProbes;

fn has_running(pod: &PodInfo) -> bool {
    pod.containers
        .values()
        .any(|c| c.state == RunState::Running)
}

/// Whether `pod` has a container named `name`: in CRI, or in the API's pod spec.
pub(super) fn pod_has(pod: &PodInfo, name: &str) -> bool {
    pod.current(name).is_some()
        || pod
            .api
            .as_ref()
            .is_some_and(|a| a.container(name).is_some())
}

impl Manager {
    /// After a pod's containers (or its API view) changed: pending names the pod now has get
    /// their workers, unknown names whose container appeared get theirs back, names the API's
    /// pod spec lacks are reported at once, and a check is scheduled while some name has none.
    pub(super) fn reconcile_names(&self, uid: &str) {
        let mut start: Vec<(String, ContainerProbes)> = Vec::new();
        let mut schedule = false;
        let shared = self.inner.pods.entry(uid, |entry| {
            let pod = entry.shared.read().clone();
            let names: BTreeSet<&str> = pod.containers.values().map(|c| c.name.as_str()).collect();
            let u = &mut entry.unknown;
            if names.iter().any(|n| !u.seen.contains(*n)) {
                u.last_new = Some(Instant::now());
                u.seen.extend(names.iter().map(|n| (*n).to_owned()));
            }
            let errors_before = entry_errors(entry);
            let back: Vec<String> = entry
                .unknown
                .names
                .iter()
                .filter(|n| pod_has(&pod, n))
                .cloned()
                .collect();
            if !back.is_empty() {
                // Their probes were not kept: parse them again.
                let mut parsed = self.parse(&pod, &entry.annotation).probes;
                for n in back {
                    entry.unknown.names.remove(&n);
                    if let Some(p) = parsed.containers.remove(&n) {
                        tracing::info!(pod_uid = %uid, container = %n,
                            "container named in podward.io/probes appeared; its probes start");
                        entry.probes.insert(n.clone(), p);
                        entry.unknown.pending.insert(n);
                    }
                }
            }
            let mut unknown_now = Vec::new();
            for n in &entry.unknown.pending {
                if pod_has(&pod, n) {
                    if let Some(p) = entry.probes.get(n) {
                        start.push((n.clone(), p.clone()));
                    }
                } else if pod.api.is_some() {
                    unknown_now.push(n.clone());
                }
            }
            for (n, _) in &start {
                entry.unknown.pending.remove(n);
            }
            for n in unknown_now {
                mark_unknown(entry, &pod, n);
            }
            let missing = entry
                .probes
                .keys()
                .any(|n| !pod_has(&pod, n) && !entry.unknown.names.contains(n));
            if missing && has_running(&pod) && !entry.unknown.scheduled {
                entry.unknown.scheduled = true;
                schedule = true;
            }
            if entry_errors(entry) != errors_before {
                self.inner.set_spec_errors(&pod, entry_errors(entry));
            }
            entry.shared.clone()
        });
        let Some(shared) = shared else {
            return;
        };
        for (name, probes) in &start {
            self.spawn_workers(uid, name, probes, &shared);
        }
        if schedule {
            tokio::spawn(check(Arc::downgrade(&self.inner), uid.to_owned()));
        }
    }
}

fn entry_errors(entry: &PodEntry) -> usize {
    entry.spec_errors.len() + entry.unknown.names.len()
}

/// Reports `name` as unknown: no workers (the caller stops any), no probes kept.
fn mark_unknown(entry: &mut PodEntry, pod: &PodInfo, name: String) {
    entry.probes.remove(&name);
    entry.unknown.pending.remove(&name);
    tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
        container = %name, error = %unknown_name_error(&name).message,
        "podward.io/probes names a container this pod does not have");
    entry.unknown.names.insert(name);
}

/// Waits out the grace from the last new container, then reports the names still missing.
async fn check(state: Weak<Inner>, uid: String) {
    loop {
        let due = {
            let Some(state) = state.upgrade() else { return };
            let due = state.pods.entry(&uid, |entry| {
                entry.unknown.last_new.unwrap_or_else(Instant::now) + UNKNOWN_CONTAINER_GRACE
            });
            let Some(due) = due else { return };
            due
        };
        tokio::time::sleep_until(due).await;
        let Some(state) = state.upgrade() else { return };
        let stale = state.pods.entry(&uid, |entry| {
            entry
                .unknown
                .last_new
                .is_some_and(|t| t + UNKNOWN_CONTAINER_GRACE > Instant::now())
        });
        let Some(stale) = stale else { return };
        if !stale {
            flag(&state, &uid);
            return;
        }
    }
}

/// Reports every name of the annotation that the pod does not have, and stops its workers.
fn flag(state: &Inner, uid: &str) {
    let mut stop = BTreeSet::new();
    let found = state.pods.entry(uid, |entry| {
        entry.unknown.scheduled = false;
        let pod = entry.shared.read().clone();
        let gone: Vec<String> = entry
            .probes
            .keys()
            .filter(|n| !pod_has(&pod, n))
            .cloned()
            .collect();
        for name in gone {
            stop.insert(name.clone());
            mark_unknown(entry, &pod, name);
        }
        state.set_spec_errors(&pod, entry_errors(entry));
    });
    if found.is_none() || stop.is_empty() {
        return;
    }
    let workers = state
        .pods
        .remove_workers(uid, |k| stop.contains(&k.container));
    state.stop_workers(workers);
}
