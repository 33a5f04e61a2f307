//! A known pod seen again: its view replaced for the workers, and what that changes for the
//! manager (an annotation to parse again, containers that just started running).

use std::collections::HashSet;
use std::sync::Arc;

use super::annotation;
use crate::model::{PodInfo, RunState};
use crate::pods::pod_table::PodEntry;

/// What a refresh of a known pod changed.
pub(super) struct Refreshed {
    /// The annotation to apply (the API's copy changed, or what its parse depends on).
    pub(super) annotation: Option<Option<String>>,
    /// Containers whose current instance just started running.
    pub(super) started: Vec<String>,
}

/// Replaces `entry`'s pod with `pod` (the workers see it at their next probe); returns what
/// changed.
pub(super) fn refresh(entry: &PodEntry, pod: PodInfo) -> Refreshed {
    // Only the API's copy can change what runs: CRI's is frozen at sandbox creation, and
    // kubelet ignores spec updates of a known pod.
    let wanted = pod.api.as_ref().map(|a| a.probes_annotation.clone());
    let mut cur = entry.shared.write();
    let started = newly_running(&cur, &pod);
    // Which names are init or ephemeral containers, which probes the spec declares and whether
    // the pod is gated are known only from the API: when that view arrives (or they change),
    // the annotation is parsed again, whatever came first.
    let kinds_changed = annotation::parse_facts(&cur) != annotation::parse_facts(&pod);
    *cur = Arc::new(pod);
    let changed = wanted.as_ref().is_some_and(|w| {
        w.as_deref() != Some(entry.annotation.as_str()) || (kinds_changed && w.is_some())
    });
    let annotation = wanted.filter(|_| changed);
    Refreshed {
        annotation,
        started,
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
