//! A pod's entry as its inputs make it: the entry of a pod met for the first time, and the
//! entry after the API's copy of its annotation changed. Only the entry changes here; which
//! workers follow from it is the reconciler's decision ([`super::wanted`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::annotation::{self, Parsed};
use super::unknown::pod_has;
use crate::model::PodInfo;
use crate::pods::pod_table::{PodEntry, UnknownNames};
use crate::probing::pod_view::PodView;

/// The entry of probed pod `pod`, from `annotation` parsed as `parsed`. Every name waits for
/// its container: the reconciler gives workers to those the pod has and reports those it
/// cannot have.
pub(super) fn new_entry(pod: PodInfo, annotation: String, parsed: Parsed) -> PodEntry {
    let Parsed {
        probes: parsed,
        invalid,
    } = parsed;
    let unknown = UnknownNames {
        pending: parsed.containers.keys().cloned().collect(),
        ..UnknownNames::default()
    };
    PodEntry {
        shared: Arc::new(PodView::new(pod)),
        startup: annotation::startup_gating(&parsed),
        spec_errors: parsed.errors,
        invalid,
        annotation,
        probes: parsed.containers,
        unknown,
        ended: BTreeSet::new(),
    }
}

/// Applies the API's new `annotation` of `pod`, parsed as `parsed`, to its `entry`; returns how
/// many spec errors the pod has now. A name the new annotation drops is no longer an error; one
/// it keeps stays unknown (no worker, no probes kept) until its container appears; names the pod
/// does not have (yet) wait for their container. Workers that ended on their own may run again:
/// the probes changed.
pub(super) fn reannotate(
    entry: &mut PodEntry,
    pod: &PodInfo,
    annotation: String,
    parsed: Parsed,
) -> usize {
    let Parsed {
        probes: parsed,
        invalid,
    } = parsed;
    entry.startup = annotation::startup_gating(&parsed);
    entry.spec_errors = parsed.errors;
    entry.invalid = invalid;
    entry.annotation = annotation;
    let probes = parsed.containers;
    entry.unknown.names.retain(|n| probes.contains_key(n));
    let unknown = &entry.unknown.names;
    entry.probes = probes;
    entry.probes.retain(|n, _| !unknown.contains(n));
    entry.unknown.pending = entry
        .probes
        .keys()
        .filter(|n| !pod_has(pod, n))
        .cloned()
        .collect();
    entry.ended.clear();
    entry.spec_errors.len() + entry.unknown.names.len()
}
