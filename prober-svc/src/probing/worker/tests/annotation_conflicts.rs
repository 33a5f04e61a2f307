//! Annotations that podward cannot run as written: a probe type the pod spec declares too (kubelet
//! runs it; podward defers, never a second killer) and a readiness probe on a pod without the
//! prober's readiness gate (it would move no Service). Both are told where users look: a
//! `Warning` event on the pod, the spec-error gauge, a `status` line.

use std::time::Duration;

use super::harness::*;
use crate::model::api_pod::{ContainerKind, RestartPolicy};
use crate::publish::event::EventKind;
use crate::spec::ProbeType;

const BOTH: &str = r#"{"c":{
  "livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1},
  "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

fn warnings(n: &Node) -> Vec<(String, &'static str, String)> {
    n.seen
        .0
        .lock()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::AnnotationWarning { .. }))
        .filter_map(|e| {
            e.recorded()
                .filter(|r| r.warning)
                .map(|r| (e.container_name.clone(), r.reason, r.message))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_probe_type_in_the_spec_and_the_annotation_is_kubelets_alone_never_a_second_killer() {
    let n = Node::steady().await;
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    let p = pod("u", BOTH, vec![running(&n.clock, "c1", "c", 0, S)]);
    let mut view = api_pod(
        &p,
        RestartPolicy::Always,
        Some(BOTH),
        vec![("c", ContainerKind::Regular, None)],
    );
    view.containers[0].spec_probes = vec![ProbeType::Liveness];
    n.manager.set_api_pod(view);
    n.manager.update_pod(p);
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "readiness only: kubelet has liveness"
    );
    run_for(5 * S).await;
    assert!(n.kills.done.lock().is_empty(), "no second killer");
    let w = warnings(&n);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!((w[0].0.as_str(), w[0].1), ("c", "ProbeDeclaredTwice"));
    assert!(w[0].2.contains("livenessProbe"), "{}", w[0].2);
    let st = n.manager.view().status(Some("u"));
    let errs = &st.pods[0].spec_errors;
    assert_eq!(errs.len(), 1);
    assert_eq!(
        (errs[0].container.as_str(), errs[0].field.as_str()),
        ("c", "livenessProbe")
    );
}

#[tokio::test(start_paused = true)]
async fn a_readiness_probe_on_a_pod_without_the_gate_is_told_and_still_runs() {
    let n = Node::steady().await;
    let p = pod("u", BOTH, vec![running(&n.clock, "c1", "c", 0, S)]);
    let mut view = api_pod(
        &p,
        RestartPolicy::Always,
        Some(BOTH),
        vec![("c", ContainerKind::Regular, None)],
    );
    view.gated = false;
    n.manager.set_api_pod(view);
    n.manager.update_pod(p);
    assert_eq!(n.manager.registry().worker_count(), 2);
    let w = warnings(&n);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1, "ReadinessGateMissing");
    assert!(w[0].2.contains("readinessGates"), "{}", w[0].2);
    let st = n.manager.view().status(Some("u"));
    assert_eq!(st.pods[0].spec_errors.len(), 1);
    assert_eq!(st.pods[0].spec_errors[0].field, "readinessProbe");
}

#[tokio::test(start_paused = true)]
async fn seen_from_cri_first_the_spec_probe_still_wins_when_the_api_view_arrives() {
    let n = Node::steady().await;
    let p = pod("u", BOTH, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.update_pod(p.clone());
    assert_eq!(n.manager.registry().worker_count(), 2);
    let mut view = api_pod(
        &p,
        RestartPolicy::Always,
        Some(BOTH),
        vec![("c", ContainerKind::Regular, None)],
    );
    view.containers[0].spec_probes = vec![ProbeType::Liveness];
    n.manager.set_api_pod(view);
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "the annotation's liveness stopped"
    );
    assert_eq!(warnings(&n).len(), 1);
}
