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

use tokio::time::Instant;

use crate::model::{PodInfo, RunState};
use crate::pods::pod_table::{PodEntry, UNKNOWN_CONTAINER_GRACE, unknown_name_error};
use crate::spec::PodProbes;

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

/// What [`follow`] found for the reconciler to do.
pub(super) struct Followed {
    /// The pod's spec errors changed: how many it has now.
    pub(super) errors: Option<usize>,
    /// A check must be scheduled ([`due`], then [`flag`]): some name has no container yet.
    pub(super) schedule: bool,
}

/// Follows a pod's names after its containers (or its API view) changed, in its `entry`: pending
/// names the pod now has stop waiting (they get their workers), unknown names whose container
/// appeared wait again with their probes parsed anew through `reparse` (which gets the pod and
/// its annotation), names the API's pod spec lacks are reported at once, and a check is asked
/// for while some name has no container.
pub(super) fn follow(
    entry: &mut PodEntry,
    reparse: impl FnOnce(&PodInfo, &str) -> PodProbes,
) -> Followed {
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
        let mut parsed = reparse(&pod, &entry.annotation);
        for n in back {
            entry.unknown.names.remove(&n);
            if let Some(p) = parsed.containers.remove(&n) {
                tracing::info!(pod_uid = %pod.uid, container = %n,
                    "container named in podward.io/probes appeared; its probes start");
                entry.probes.insert(n.clone(), p);
                entry.unknown.pending.insert(n);
            }
        }
    }
    let mut start = BTreeSet::new();
    let mut unknown_now = Vec::new();
    for n in &entry.unknown.pending {
        if pod_has(&pod, n) {
            start.insert(n.clone());
        } else if pod.api.is_some() {
            unknown_now.push(n.clone());
        }
    }
    // A name that stops waiting gets all its workers, those that once ended included.
    entry.unknown.pending.retain(|n| !start.contains(n));
    entry.ended.retain(|k| !start.contains(&k.container));
    for n in unknown_now {
        mark_unknown(entry, &pod, n);
    }
    let missing = entry
        .probes
        .keys()
        .any(|n| !pod_has(&pod, n) && !entry.unknown.names.contains(n));
    let schedule = missing && has_running(&pod) && !entry.unknown.scheduled;
    if schedule {
        entry.unknown.scheduled = true;
    }
    let errors = entry_errors(entry);
    Followed {
        errors: (errors != errors_before).then_some(errors),
        schedule,
    }
}

/// The number of spec errors of the pod of `entry`.
pub(super) fn entry_errors(entry: &PodEntry) -> usize {
    entry.spec_errors.len() + entry.unknown.names.len()
}

/// Reports `name` as unknown: no workers, no probes kept.
fn mark_unknown(entry: &mut PodEntry, pod: &PodInfo, name: String) {
    entry.probes.remove(&name);
    entry.unknown.pending.remove(&name);
    tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
        container = %name, error = %unknown_name_error(&name).message,
        "podward.io/probes names a container this pod does not have");
    entry.unknown.names.insert(name);
}

/// When the check of `entry`'s names is due: the grace from the last new container.
pub(super) fn due(entry: &mut PodEntry) -> Instant {
    entry.unknown.last_new.unwrap_or_else(Instant::now) + UNKNOWN_CONTAINER_GRACE
}

/// Whether a new container appeared within the grace (the check waits again).
pub(super) fn still_new(entry: &mut PodEntry) -> bool {
    entry
        .unknown
        .last_new
        .is_some_and(|t| t + UNKNOWN_CONTAINER_GRACE > Instant::now())
}

/// The check: reports every name of the annotation that the pod does not have (their workers
/// are no longer wanted). Returns the pod and its number of spec errors, and whether a name was
/// reported.
pub(super) fn flag(entry: &mut PodEntry) -> (PodInfo, usize, bool) {
    entry.unknown.scheduled = false;
    let pod = PodInfo::clone(&entry.shared.read());
    let gone: Vec<String> = entry
        .probes
        .keys()
        .filter(|n| !pod_has(&pod, n))
        .cloned()
        .collect();
    let flagged = !gone.is_empty();
    for name in gone {
        mark_unknown(entry, &pod, name);
    }
    let errors = entry_errors(entry);
    (pod, errors, flagged)
}
