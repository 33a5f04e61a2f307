//! The decision of the reconciler: which workers a pod wants, from its entry alone (the
//! annotation's probes as parsed against the pod and its API view, the names still waiting for
//! their container or unknown, and the workers that ended on their own). Pure: nothing here
//! starts, stops or tells anything.

use std::sync::Arc;

use super::annotation::container_worker_specs;
use crate::pods::pod_table::{PodEntry, Wanted};

/// The workers pod `uid` wants: one per probe of each name of its annotation whose container
/// the pod has (a name waiting for its container, or unknown, has none), less those that ended
/// on their own.
pub(super) fn wanted(uid: &str, entry: &PodEntry) -> Wanted {
    let unknown = &entry.unknown;
    entry
        .probes
        .iter()
        .filter(|(name, _)| !unknown.pending.contains(*name) && !unknown.names.contains(*name))
        .flat_map(|(name, probes)| container_worker_specs(uid, name, probes.clone()))
        .filter(|(key, ..)| !entry.ended.contains(key))
        .map(|(key, spec, startup)| (key, (Arc::new(spec), startup)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::model::PodInfo;
    use crate::pods::pod_table::UnknownNames;
    use crate::probing::pod_view::PodView;
    use crate::probing::worker::handle::WorkerKey;
    use crate::spec::{ProbeType, parse_pod_probes};

    fn entry(annotation: &str) -> PodEntry {
        let parsed = parse_pod_probes(annotation);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        PodEntry {
            shared: Arc::new(PodView::new(PodInfo {
                uid: "u".into(),
                name: "pod-u".into(),
                namespace: "default".into(),
                sandbox_id: "sb-u".into(),
                sandbox_created_at_ns: 1,
                ip: None,
                probes_annotation: Some(annotation.to_owned()),
                stop_requested_at_ns: 0,
                containers: BTreeMap::new(),
                api: None,
            })),
            spec_errors: Vec::new(),
            invalid: 0,
            startup: BTreeMap::new(),
            annotation: annotation.to_owned(),
            probes: parsed.containers,
            unknown: UnknownNames::default(),
            ended: BTreeSet::new(),
        }
    }

    fn key(container: &str, ty: ProbeType) -> WorkerKey {
        WorkerKey {
            pod_uid: "u".into(),
            container: container.into(),
            ty,
        }
    }

    const TWO: &str = r#"{"a":{"livenessProbe":{"exec":{"command":["true"]}},
        "readinessProbe":{"exec":{"command":["true"]}}},
        "b":{"livenessProbe":{"exec":{"command":["true"]}}}}"#;

    #[test]
    fn every_probe_of_a_name_the_pod_has_less_waiting_unknown_and_ended_ones() {
        let mut e = entry(TWO);
        let all: Vec<WorkerKey> = wanted("u", &e).into_keys().collect();
        assert_eq!(
            all,
            vec![
                key("a", ProbeType::Liveness),
                key("a", ProbeType::Readiness),
                key("b", ProbeType::Liveness)
            ]
        );
        e.unknown.pending.insert("b".into());
        e.ended.insert(key("a", ProbeType::Liveness));
        let some: Vec<WorkerKey> = wanted("u", &e).into_keys().collect();
        assert_eq!(some, vec![key("a", ProbeType::Readiness)]);
        e.unknown.pending.clear();
        e.unknown.names.insert("b".into());
        let some: Vec<WorkerKey> = wanted("u", &e).into_keys().collect();
        assert_eq!(some, vec![key("a", ProbeType::Readiness)]);
    }
}
