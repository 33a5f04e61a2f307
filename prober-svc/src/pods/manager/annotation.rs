//! From a pod's `podward.io/probes` annotation to the workers it asks for: which copy of the
//! annotation counts, its parse (with what the node's host policy and the API's view of the pod
//! refuse), and one worker spec per (container, probe type).

use std::collections::BTreeMap;

use crate::handler::host_policy::NodePolicy;
use crate::model::PodInfo;
use crate::model::api_pod::{ApiPod, ContainerKind};
use crate::probing::worker::handle::WorkerKey;
use crate::publish::event::{Event, EventKind, Events, REASON_PROBE_SPEC_INVALID};
use crate::spec::{
    ContainerProbes, PodProbes, ProbeSpec, ProbeType, SpecError, StartupGating, parse_pod_probes,
    spec_invalid_message,
};

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

/// The annotation's parse: its probes and errors, and how many of those errors (the first ones)
/// make it invalid (the rest are findings on valid probes, such as a probe deferred to kubelet).
pub(super) struct Parsed {
    /// Probes and every error.
    pub(super) probes: PodProbes,
    /// `probes.errors[..invalid]` are what the API server would refuse, or what this node
    /// refuses to run: each holds a gated pod not ready.
    pub(super) invalid: usize,
}

/// `annotation` of `pod` parsed; with the API's view, probes of plain init containers and of
/// ephemeral containers are refused as the API server refuses them in a pod spec, a name that
/// is no container of the pod is refused, and probes the pod spec declares too are deferred
/// ([`conflicts`], which warns on `events`). Each invalid finding is logged and, with the API's
/// view, told in a `Warning` `ProbeSpecInvalid` event.
pub(super) fn parse(
    pod: &PodInfo,
    annotation: &str,
    host_policy: Option<&NodePolicy>,
    events: &Events,
    at_ns: i64,
) -> Parsed {
    let mut parsed = parse_pod_probes(annotation);
    if let Some(p) = host_policy {
        let host_network = pod.ip.is_some_and(|ip| p.host_network(ip));
        p.policy().deny_hosts(&mut parsed, host_network);
    }
    if let Some(api) = &pod.api {
        refuse_names(&mut parsed, api);
    }
    let invalid = parsed.errors.len();
    if let Some(api) = &pod.api {
        conflicts::apply(&mut parsed, pod, api, events, at_ns);
    }
    for e in &parsed.errors[..invalid] {
        tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
            container = %e.container, field = %e.field, error = %e.message,
            "invalid probe in the podward.io/probes annotation; this probe is not run");
        if let Some(api) = &pod.api {
            events.publish(invalid_event(pod, api, e, at_ns));
        }
    }
    Parsed {
        probes: parsed,
        invalid,
    }
}

/// Refuses what the API's view of the pod makes invalid: names of plain init and ephemeral
/// containers (the API server refuses probes on them in a pod spec) and names no container of
/// the pod has (a pod's containers are immutable, so such a name never gets one).
fn refuse_names(parsed: &mut PodProbes, api: &ApiPod) {
    let refused: Vec<(String, &'static str)> = parsed
        .containers
        .keys()
        .filter_map(|n| match api.container(n).map(|c| c.kind) {
            None => Some((n.clone(), "")),
            Some(ContainerKind::Init) => Some((
                n.clone(),
                "Forbidden: probes may not be set for init containers without \
                 restartPolicy=Always",
            )),
            Some(ContainerKind::Ephemeral) => Some((
                n.clone(),
                "Forbidden: cannot be set for an Ephemeral Container",
            )),
            Some(_) => None,
        })
        .collect();
    for (name, message) in refused {
        parsed.containers.remove(&name);
        let message = if message.is_empty() {
            format!("Not found: {name:?}: this pod has no container of that name")
        } else {
            message.to_owned()
        };
        parsed.errors.push(SpecError {
            container: name,
            field: String::new(),
            message,
        });
    }
}

/// The `Warning` `ProbeSpecInvalid` event of invalid finding `e`, on its container when the
/// pod has one of that name, else on the pod.
fn invalid_event(pod: &PodInfo, api: &ApiPod, e: &SpecError, at_ns: i64) -> Event {
    let container = api.container(&e.container);
    Event {
        pod_uid: pod.uid.clone(),
        pod_name: pod.name.clone(),
        pod_namespace: pod.namespace.clone(),
        container_name: container.map(|c| c.name.clone()).unwrap_or_default(),
        container_id: String::new(),
        init_container: container.is_some_and(|c| c.kind != ContainerKind::Regular),
        probe: probe_of(&e.field),
        at_ns,
        kind: EventKind::AnnotationWarning {
            reason: REASON_PROBE_SPEC_INVALID,
            message: spec_invalid_message(std::slice::from_ref(e)),
        },
    }
}

/// The probe type a field path is under (readiness when it names none).
fn probe_of(field: &str) -> ProbeType {
    ProbeType::ALL
        .into_iter()
        .find(|t| field.split('.').next() == Some(t.field_name()))
        .unwrap_or(ProbeType::Readiness)
}

/// Whether each container's startup probe gates its other probes.
pub(super) fn startup_gating(parsed: &PodProbes) -> BTreeMap<String, StartupGating> {
    parsed
        .containers
        .iter()
        .map(|(n, c)| (n.clone(), c.startup_gating()))
        .collect()
}

/// The workers of one container's probes: key, spec, and whether its startup probe gates them.
pub(super) fn container_worker_specs(
    uid: &str,
    name: &str,
    probes: ContainerProbes,
) -> Vec<(WorkerKey, ProbeSpec, StartupGating)> {
    let gating = probes.startup_gating();
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
        spec.map(|spec| (key, spec, gating))
    })
    .collect()
}
