//! `migrate --revert`: the probes of `podward.io/probes` back into their containers, and what
//! the takeover added taken away again — the readiness gate and the nodeSelector entry that
//! `podward.io/probes-moved` records (without a record, as after a migration by hand, the
//! gate `policy` names).

use serde_json::Value;
use serde_norway::Value as Yaml;
use serde_norway::mapping::Mapping;

use super::outcome::Outcome;
use crate::kubernetes::admission::takeover::{Policy, SkipReason};
use crate::kubernetes::names::{MOVED_ANNOTATION, PROBES_ANNOTATION};
use crate::spec::ProbeType;

/// Reverts one pod (or pod template).
pub fn revert(pod: &mut Yaml, policy: &Policy) -> Outcome {
    let Some(annotations) = pod
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Yaml::as_mapping)
    else {
        return Outcome::NothingToRevert;
    };
    let Some(text) = annotations.get(PROBES_ANNOTATION).and_then(Yaml::as_str) else {
        return Outcome::NothingToRevert;
    };
    let Ok(Value::Object(probes)) = serde_json::from_str::<Value>(text) else {
        return Outcome::Skipped(SkipReason::InvalidProbe);
    };
    let record: Option<Value> = annotations
        .get(MOVED_ANNOTATION)
        .and_then(Yaml::as_str)
        .and_then(|s| serde_json::from_str(s).ok());
    let Some(spec) = pod.get_mut("spec").and_then(Yaml::as_mapping_mut) else {
        return Outcome::NothingToRevert;
    };
    for (name, entry) in &probes {
        let Some(container) = find_container(spec, name) else {
            continue;
        };
        for ty in [
            ProbeType::Liveness,
            ProbeType::Readiness,
            ProbeType::Startup,
        ] {
            let field = ty.field_name();
            let Some(probe) = entry.get(field).filter(|p| !p.is_null()) else {
                continue;
            };
            // Declared in both places, the container's copy is the one that ran (kubelet's).
            if container.contains_key(field) {
                continue;
            }
            if let Ok(probe) = serde_norway::to_value(probe) {
                container.insert(Yaml::String(field.to_owned()), probe);
            }
        }
    }
    let gate = match &record {
        Some(r) => r
            .get("readinessGate")
            .and_then(Value::as_str)
            .map(str::to_owned),
        None => Some(policy.gate_condition.clone()),
    };
    if let Some(gate) = gate {
        remove_gate(spec, &gate);
    }
    if let Some(Value::Object(added)) = record.as_ref().and_then(|r| r.get("nodeSelector")) {
        if let Some(selector) = spec.get_mut("nodeSelector").and_then(Yaml::as_mapping_mut) {
            for (key, value) in added {
                if selector.get(key.as_str()).and_then(Yaml::as_str) == value.as_str() {
                    selector.remove(key.as_str());
                }
            }
        }
        drop_if_empty(spec, "nodeSelector");
    }
    if let Some(meta) = pod.get_mut("metadata").and_then(Yaml::as_mapping_mut) {
        if let Some(a) = meta.get_mut("annotations").and_then(Yaml::as_mapping_mut) {
            a.remove(PROBES_ANNOTATION);
            a.remove(MOVED_ANNOTATION);
        }
        drop_if_empty(meta, "annotations");
    }
    // A template without metadata got one for the annotations alone.
    if let Some(pod) = pod.as_mapping_mut() {
        drop_if_empty(pod, "metadata");
    }
    Outcome::Changed
}

/// The container (or init container) named `name`.
fn find_container<'a>(spec: &'a mut Mapping, name: &str) -> Option<&'a mut Mapping> {
    let named = |spec: &Mapping, list: &str| {
        spec.get(list)
            .and_then(Yaml::as_sequence)
            .and_then(|items| {
                items
                    .iter()
                    .position(|c| c.get("name").and_then(Yaml::as_str) == Some(name))
            })
    };
    let (list, index) = ["containers", "initContainers"]
        .into_iter()
        .find_map(|list| named(spec, list).map(|i| (list, i)))?;
    spec.get_mut(list)?
        .as_sequence_mut()?
        .get_mut(index)?
        .as_mapping_mut()
}

fn remove_gate(spec: &mut Mapping, gate: &str) {
    if let Some(Yaml::Sequence(gates)) = spec.get_mut("readinessGates") {
        gates.retain(|g| g.get("conditionType").and_then(Yaml::as_str) != Some(gate));
    }
    drop_if_empty(spec, "readinessGates");
}

/// Removes `key` when it holds an empty mapping or sequence.
fn drop_if_empty(m: &mut Mapping, key: &str) {
    let empty = match m.get(key) {
        Some(Yaml::Mapping(x)) => x.is_empty(),
        Some(Yaml::Sequence(x)) => x.is_empty(),
        _ => false,
    };
    if empty {
        m.remove(key);
    }
}
