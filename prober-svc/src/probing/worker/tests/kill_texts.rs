//! kubelet's `Killing` texts by restart policy and container kind, and its grace rules around
//! the preStop hook (`setTerminationGracePeriod`, `killContainer`): a grace of 0 skips the hook
//! and the stop still gets the 2 s minimum.

use std::time::Duration;

use super::harness::*;
use crate::event::EventKind;
use crate::model::api_pod::{ContainerKind, Hook, RestartPolicy};
use crate::spec::ProbeType;

const LIVE: &str = r#"{"c":{"livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1}}}"#;
const STARTUP: &str = r#"{"c":{"startupProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1}}}"#;

/// The `Killing` messages the kill path published.
fn killing(n: &Node) -> Vec<String> {
    n.seen
        .0
        .lock()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Killing { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

async fn kill_text(
    ann: &str,
    ty: ProbeType,
    policy: Option<RestartPolicy>,
    kind: ContainerKind,
) -> Vec<String> {
    let n = Node::steady().await;
    n.script.set("c", ty, failure(), Duration::ZERO);
    let p = pod("u", ann, vec![running(&n.clock, "c1", "c", 0, S)]);
    if let Some(policy) = policy {
        n.manager
            .set_api_pod(api_pod(&p, policy, Some(ann), vec![("c", kind, None)]));
    }
    n.manager.update_pod(p);
    run_for(3 * S).await;
    killing(&n)
}

#[tokio::test(start_paused = true)]
async fn killing_says_will_be_restarted_only_when_kubelet_would_restart_and_names_sidecars() {
    let regular = ContainerKind::Regular;
    for (ann, ty, policy, kind, want) in [
        (
            LIVE,
            ProbeType::Liveness,
            Some(RestartPolicy::Always),
            regular,
            "Container c failed liveness probe, will be restarted",
        ),
        (
            LIVE,
            ProbeType::Liveness,
            Some(RestartPolicy::OnFailure),
            regular,
            "Container c failed liveness probe, will be restarted",
        ),
        (
            LIVE,
            ProbeType::Liveness,
            Some(RestartPolicy::Never),
            regular,
            "Container c failed liveness probe",
        ),
        (
            STARTUP,
            ProbeType::Startup,
            Some(RestartPolicy::Never),
            regular,
            "Container c failed startup probe",
        ),
        (
            LIVE,
            ProbeType::Liveness,
            Some(RestartPolicy::Never),
            ContainerKind::Sidecar,
            "Init container c failed liveness probe",
        ),
        (
            STARTUP,
            ProbeType::Startup,
            Some(RestartPolicy::Always),
            ContainerKind::Sidecar,
            "Init container c failed startup probe",
        ),
        // Without the API's view: the API's default policy (Always), a regular container.
        (
            LIVE,
            ProbeType::Liveness,
            None,
            regular,
            "Container c failed liveness probe, will be restarted",
        ),
    ] {
        assert_eq!(
            kill_text(ann, ty, policy, kind).await,
            vec![want.to_owned()],
            "{policy:?} {kind:?} {ty:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_pod_grace_of_zero_skips_the_hook_and_the_stop_gets_kubelets_minimum() {
    let n = Node::steady().await;
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    let mut c = running(&n.clock, "c1", "c", 0, S);
    c.pod_grace_seconds = Some(0);
    let p = pod("u", LIVE, vec![c]);
    let mut view = api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE),
        vec![(
            "c",
            ContainerKind::Regular,
            Some(Hook::Sleep(Duration::from_secs(5))),
        )],
    );
    view.grace_seconds = Some(0);
    n.manager.set_api_pod(view);
    n.manager.update_pod(p);
    run_for(5 * S).await;
    assert!(
        n.hooks.runs.lock().is_empty(),
        "kubelet runs no hook with a grace of 0"
    );
    assert_eq!(n.kills.done.lock().clone(), vec![("c1".to_owned(), 2)]);
}
