//! The `Normal` `ProbesTakenOver` event on a pod whose spec probes were moved into
//! `podward.io/probes` (`podward.io/probes-moved` records which): the takeover webhook cannot
//! record it, the pod does not exist yet when it answers, so the prober of the pod's node does,
//! the first time it sees the pod.
//!
//! Once per pod, not once per prober process: a restarted prober lists every pod of its node
//! again and must not tell each of them the same news a second time. The pod's API object says
//! whether a prober has met it before, with no state of the prober's own:
//! - its readiness-gate condition is present: a prober (this one before a restart, or the
//!   sentinel) has written it, and it is written as soon as a readiness result exists;
//! - it is no longer `Pending`: its containers run, so a prober had its chance (and a pod
//!   without a gate, as after a liveness-only takeover, has no condition to go by).
//!
//! So a prober that restarts while a pod it already announced is still starting, with no
//! condition written yet, announces it again; a pod that started while no prober ran on its
//! node gets no event (`podward.io/probes-moved` still says what moved).

use crate::model::api_pod::{ApiPod, PodPhase};
use crate::publish::event::{Event, Events};

/// Publishes the pod's `ProbesTakenOver` event on `events` if `api`, seen for the first time by
/// this prober, has not been met by a prober before and has probes moved into an annotation
/// that is still there.
pub(super) fn announce(api: &ApiPod, events: &Events, at_ns: i64) {
    if !unmet(api) {
        return;
    }
    if let Some(event) = Event::probes_taken_over(api, at_ns) {
        tracing::info!(pod = %api.name, namespace = %api.namespace, pod_uid = %api.uid,
            "the pod's spec probes were moved into podward.io/probes: podward runs them");
        events.publish(event);
    }
}

/// Whether no prober has met the pod before (see the module's rule), and it is not on its way
/// out.
fn unmet(api: &ApiPod) -> bool {
    api.phase == PodPhase::Pending
        && api.condition.is_none()
        && !api.deleting
        && api.probes_annotation.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api_pod::{
        ApiContainer, ConditionStatus, ContainerKind, GateCondition, RestartPolicy,
    };
    use crate::spec::ProbeType;

    fn pod() -> ApiPod {
        ApiPod {
            uid: "u".into(),
            namespace: "shop".into(),
            name: "web".into(),
            resource_version: "1".into(),
            restart_policy: RestartPolicy::Always,
            phase: PodPhase::Pending,
            deleting: false,
            grace_seconds: None,
            deletion_grace_seconds: None,
            probes_annotation: Some("{}".into()),
            gated: true,
            condition: None,
            containers: vec![ApiContainer {
                name: "app".into(),
                kind: ContainerKind::Regular,
                pre_stop: None,
                spec_probes: Vec::new(),
                moved_probes: vec![ProbeType::Liveness],
            }],
        }
    }

    #[test]
    fn only_a_pod_no_prober_has_met_with_probes_moved_into_its_annotation() {
        assert!(unmet(&pod()));
        let mut p = pod();
        p.condition = Some(GateCondition {
            status: ConditionStatus::False,
            reason: String::new(),
            message: String::new(),
            last_transition_time: String::new(),
        });
        assert!(!unmet(&p), "the gate condition is written");
        let mut p = pod();
        p.phase = PodPhase::Running;
        assert!(!unmet(&p), "its containers run");
        let mut p = pod();
        p.deleting = true;
        assert!(!unmet(&p), "being deleted");
        let mut p = pod();
        p.probes_annotation = None;
        assert!(
            !unmet(&p),
            "the probes were taken back out of the annotation"
        );
        let mut p = pod();
        p.containers[0].moved_probes.clear();
        assert!(Event::probes_taken_over(&p, 1).is_none(), "nothing moved");
    }
}
