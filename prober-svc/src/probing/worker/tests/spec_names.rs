//! Names in the annotation that the pod has no container for: a spec error, never a phantom
//! worker.

use super::harness::*;
use crate::model::api_pod::{ContainerKind, RestartPolicy};
use crate::pods::manager::UNKNOWN_CONTAINER_GRACE;
use crate::spec::ProbeType;

const SPEC: &str = r#"{"app":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}},
                      "ghost":{"livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

fn names(n: &Node, uid: &str) -> Vec<String> {
    n.manager.view().status(Some(uid)).pods[0]
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_name_no_container_has_is_a_spec_error_with_no_worker_once_the_pod_runs() {
    let n = Node::steady().await;
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "a1", "app", 0, S)]));
    run_for(2 * S).await;
    assert!(
        n.manager.view().status(Some("u")).pods[0]
            .spec_errors
            .is_empty(),
        "not yet: kubelet may still be creating containers"
    );
    run_for(UNKNOWN_CONTAINER_GRACE).await;
    let st = n.manager.view().status(Some("u"));
    let errs = &st.pods[0].spec_errors;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].container, "ghost");
    assert!(
        errs[0].message.contains("no container named \"ghost\""),
        "{errs:?}"
    );
    assert_eq!(names(&n, "u"), ["app"], "no phantom worker in Status");
    assert_eq!(n.manager.registry().worker_count(), 1);
    let ghost_probes = n.script.calls_of(ProbeType::Liveness).len();
    assert_eq!(ghost_probes, 0, "nothing to probe, nothing probed");
}

#[tokio::test(start_paused = true)]
async fn a_named_container_that_appears_late_clears_the_error_and_gets_its_workers() {
    let n = Node::steady().await;
    let app = running(&n.clock, "a1", "app", 0, S);
    n.manager.update_pod(pod("u", SPEC, vec![app.clone()]));
    run_for(UNKNOWN_CONTAINER_GRACE + 2 * S).await;
    assert_eq!(
        n.manager.view().status(Some("u")).pods[0].spec_errors.len(),
        1
    );
    // A long init container, say: the container comes after all.
    let ghost = running(&n.clock, "g1", "ghost", 0, S);
    n.manager.update_pod(pod("u", SPEC, vec![app, ghost]));
    run_for(2 * S).await;
    assert!(
        n.manager.view().status(Some("u")).pods[0]
            .spec_errors
            .is_empty()
    );
    assert_eq!(names(&n, "u"), ["app", "ghost"]);
    assert!(!n.script.calls_of(ProbeType::Liveness).is_empty());
}

#[tokio::test(start_paused = true)]
async fn no_name_is_unknown_while_no_container_of_the_pod_runs_or_new_ones_keep_coming() {
    let n = Node::steady().await;
    n.manager.update_pod(pod("u", SPEC, vec![]));
    run_for(3 * UNKNOWN_CONTAINER_GRACE).await;
    assert!(
        n.manager.view().status(Some("u")).pods[0]
            .spec_errors
            .is_empty()
    );
    // Init containers one after another, each within the grace: still nothing reported.
    let mut cs = Vec::new();
    for i in 0..3 {
        cs.push(running(
            &n.clock,
            &format!("i{i}"),
            &format!("init-{i}"),
            0,
            S,
        ));
        n.manager.update_pod(pod("u", SPEC, cs.clone()));
        run_for(UNKNOWN_CONTAINER_GRACE / 2).await;
        assert!(
            n.manager.view().status(Some("u")).pods[0]
                .spec_errors
                .is_empty()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_name_without_a_container_never_gets_a_worker_even_within_the_grace() {
    let n = Node::steady().await;
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "a1", "app", 0, S)]));
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "only the container the pod has is probed"
    );
    run_for(UNKNOWN_CONTAINER_GRACE / 2).await;
    assert_eq!(n.manager.registry().worker_count(), 1);
    assert_eq!(names(&n, "u"), ["app"]);
}

#[tokio::test(start_paused = true)]
async fn thousands_of_unknown_names_cost_no_worker_and_no_kept_spec() {
    let n = Node::steady().await;
    let mut spec = String::from(r#"{"app":{"readinessProbe":{"exec":{"command":["true"]}}}"#);
    for i in 0..3000 {
        spec.push_str(&format!(
            r#","ghost-{i}":{{"livenessProbe":{{"exec":{{"command":["true"]}}}},"readinessProbe":{{"exec":{{"command":["true"]}}}}}}"#
        ));
    }
    spec.push('}');
    n.manager
        .update_pod(pod("u", &spec, vec![running(&n.clock, "a1", "app", 0, S)]));
    assert_eq!(n.manager.registry().worker_count(), 1);
    run_for(UNKNOWN_CONTAINER_GRACE + 2 * S).await;
    assert_eq!(n.manager.registry().worker_count(), 1);
    let (probes, errors) = n
        .manager
        .registry()
        .entry("u", |entry| (entry.probes.len(), entry.all_errors().len()))
        .expect("pod");
    assert_eq!(probes, 1, "the probes of unknown names are not kept");
    assert_eq!(errors, 3000);
    assert_eq!(n.script.calls_of(ProbeType::Liveness).len(), 0);
    assert!(n.manager.remove_pod("u"));
    assert_eq!(n.manager.registry().worker_count(), 0);
    assert!(n.manager.registry().pod_uids().is_empty());
}

#[tokio::test(start_paused = true)]
async fn with_the_api_view_a_name_not_in_the_pod_spec_is_an_error_at_once() {
    let n = Node::steady().await;
    let mut p = pod("u", SPEC, vec![]);
    p.probes_annotation = None;
    let api = api_pod(
        &p,
        RestartPolicy::Always,
        Some(SPEC),
        vec![("app", ContainerKind::Regular, None)],
    );
    n.manager.set_api_pod(api);
    n.manager.update_pod(p);
    let st = n.manager.view().status(Some("u"));
    let errs = &st.pods[0].spec_errors;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].container, "ghost");
    // The pod spec has `app`: its worker waits for the container, as kubelet's does.
    assert_eq!(n.manager.registry().worker_count(), 1);
    assert_eq!(names(&n, "u"), ["app"]);
}
