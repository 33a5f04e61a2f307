//! From a pod's `podward.io/probes` annotation to the workers it asks for: which copy of the
//! annotation counts, its parse (with what the node's host policy and the API's view of the pod
//! refuse), and one worker spec per (container, probe type).

use std::collections::HashSet;

use crate::event::Events;
use crate::handler::host_policy::NodePolicy;
use crate::model::PodInfo;
use crate::model::api_pod::ContainerKind;
use crate::probing::worker::handle::WorkerKey;
use crate::spec::{ContainerProbes, PodProbes, ProbeSpec, ProbeType, SpecError, parse_pod_probes};

use super::conflicts;

/// The annotation that decides a pod's probes: the API's copy when the prober has the pod's API
/// view (annotations are mutable; CRI's copy is frozen at sandbox creation), else CRI's.
pub(super) fn effective_annotation(pod: &PodInfo) -> Option<&str> {
    match &pod.api {
        Some(api) => api.probes_annotation.as_deref(),
        None => pod.probes_annotation.as_deref(),
    }
}

/// What of the API's view the annotation's parse depends on besides the annotation: the
/// containers' kinds (init and ephemeral ones are never probed), the probe types their spec
/// declares (kubelet runs those) and whether the pod is gated.
pub(super) type ParseFacts<'a> = Option<(Vec<(&'a str, ContainerKind, &'a [ProbeType])>, bool)>;

/// The [`ParseFacts`] of `pod`.
pub(super) fn parse_facts(pod: &PodInfo) -> ParseFacts<'_> {
    pod.api.as_ref().map(|a| {
        let containers = a
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind, c.spec_probes.as_slice()))
            .collect();
        (containers, a.gated)
    })
}

/// `annotation` of `pod` parsed; with the API's view, probes of plain init containers and of
/// ephemeral containers are refused as the API server refuses them in a pod spec, and probes
/// the pod spec declares too are deferred ([`conflicts`], which warns on `events`).
pub(super) fn parse(
    pod: &PodInfo,
    annotation: &str,
    host_policy: Option<&NodePolicy>,
    events: &Events,
    at_ns: i64,
) -> PodProbes {
    let mut parsed = parse_pod_probes(annotation);
    if let Some(p) = host_policy {
        let host_network = pod.ip.is_some_and(|ip| p.host_network(ip));
        p.policy().deny_hosts(&mut parsed, host_network);
    }
    if let Some(api) = &pod.api {
        let refused: Vec<(String, ContainerKind)> = parsed
            .containers
            .keys()
            .filter_map(|n| {
                api.container(n)
                    .filter(|c| matches!(c.kind, ContainerKind::Init | ContainerKind::Ephemeral))
                    .map(|c| (n.clone(), c.kind))
            })
            .collect();
        for (name, kind) in refused {
            parsed.containers.remove(&name);
            let message = if kind == ContainerKind::Init {
                "Forbidden: probes may not be set for init containers without \
                 restartPolicy=Always"
            } else {
                "Forbidden: cannot be set for an Ephemeral Container"
            };
            parsed.errors.push(SpecError {
                container: name,
                field: String::new(),
                message: message.to_owned(),
            });
        }
    }
    let invalid = parsed.errors.len();
    if let Some(api) = &pod.api {
        conflicts::apply(&mut parsed, pod, api, events, at_ns);
    }
    for e in &parsed.errors[..invalid] {
        tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
            container = %e.container, field = %e.field, error = %e.message,
            "invalid probe in the podward.io/probes annotation; this probe is not run");
    }
    parsed
}

/// Names of the containers with a startup probe.
pub(super) fn startup_names(parsed: &PodProbes) -> HashSet<String> {
    parsed
        .containers
        .iter()
        .filter(|(_, c)| c.startup.is_some())
        .map(|(n, _)| n.clone())
        .collect()
}

/// Every worker a parsed annotation asks for: key, spec, and whether its container has a
/// startup probe.
pub(super) fn worker_specs(uid: &str, parsed: PodProbes) -> Vec<(WorkerKey, ProbeSpec, bool)> {
    parsed
        .containers
        .into_iter()
        .flat_map(|(name, probes)| container_worker_specs(uid, &name, probes))
        .collect()
}

/// The workers of one container's probes: key, spec, and whether it has a startup probe.
pub(super) fn container_worker_specs(
    uid: &str,
    name: &str,
    probes: ContainerProbes,
) -> Vec<(WorkerKey, ProbeSpec, bool)> {
    let has_startup = probes.startup.is_some();
    [
        (ProbeType::Startup, probes.startup),
        (ProbeType::Readiness, probes.readiness),
        (ProbeType::Liveness, probes.liveness),
    ]
    .into_iter()
    .filter_map(|(ty, spec)| {
        let key = WorkerKey {
            pod_uid: uid.to_owned(),
            container: name.to_owned(),
            ty,
        };
        spec.map(|spec| (key, spec, has_startup))
    })
    .collect()
}
