//! What the `podward.io/probes` annotation asks for that podward does not do as written, told
//! where users look (a `Warning` event on the pod, the `podward_prober_spec_errors` gauge and a
//! `status` line, both through the pod's spec errors):
//!
//! - a probe type the container's own spec declares too: kubelet runs the spec's, so podward
//!   defers and does not run the annotation's (two liveness probes would be two killers: a
//!   double `Killing`, double restarts);
//! - a readiness probe on a pod whose `spec.readinessGates` lacks the prober's condition: it
//!   runs (`status` shows it) but no Service follows it.

use crate::model::PodInfo;
use crate::model::api_pod::{ApiPod, ContainerKind};
use crate::publish::event::{
    Event, EventKind, Events, REASON_PROBE_DECLARED_TWICE, REASON_READINESS_GATE_MISSING,
};
use crate::spec::{PodProbes, ProbeType, SpecError};

/// Applies both rules to `parsed` with the API's view `api` of `pod`: probes the spec declares
/// too are removed; each finding becomes a spec error and a `Warning` event on `events`.
pub(super) fn apply(
    parsed: &mut PodProbes,
    pod: &PodInfo,
    api: &ApiPod,
    events: &Events,
    at_ns: i64,
) {
    for (name, probes) in &mut parsed.containers {
        let spec = api.container(name);
        let mut found: Vec<(ProbeType, &'static str, String)> = Vec::new();
        for ty in spec.map(|c| c.spec_probes.as_slice()).unwrap_or_default() {
            let slot = match ty {
                ProbeType::Liveness => &mut probes.liveness,
                ProbeType::Readiness => &mut probes.readiness,
                ProbeType::Startup => &mut probes.startup,
            };
            if slot.take().is_some() {
                found.push((
                    *ty,
                    REASON_PROBE_DECLARED_TWICE,
                    format!(
                        "container {name}: {} is declared both in the pod spec and in the podward.io/probes annotation; kubelet runs the spec's, podward does not run the annotation's",
                        field(*ty)
                    ),
                ));
            }
        }
        if !api.gated && probes.readiness.is_some() {
            found.push((
                ProbeType::Readiness,
                REASON_READINESS_GATE_MISSING,
                format!(
                    "container {name}: the podward.io/probes readinessProbe runs, but the pod's spec.readinessGates lacks the prober's condition, so no Service follows it"
                ),
            ));
        }
        for (ty, reason, message) in found {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, pod_uid = %pod.uid,
                container = %name, reason, "{message}");
            parsed.errors.push(SpecError {
                container: name.clone(),
                field: field(ty).to_owned(),
                message: message.clone(),
            });
            events.publish(Event {
                pod_uid: pod.uid.clone(),
                pod_name: pod.name.clone(),
                pod_namespace: pod.namespace.clone(),
                container_name: name.clone(),
                container_id: String::new(),
                init_container: spec.is_some_and(|c| c.kind != ContainerKind::Regular),
                probe: ty,
                at_ns,
                kind: EventKind::AnnotationWarning { reason, message },
            });
        }
    }
}

fn field(ty: ProbeType) -> &'static str {
    match ty {
        ProbeType::Liveness => "livenessProbe",
        ProbeType::Readiness => "readinessProbe",
        ProbeType::Startup => "startupProbe",
    }
}
