//! kubelet's `Killing` texts by restart policy and container kind, saying what follows a stop
//! by podward (`ShouldContainerBeRestarted`); a `Never` pod with no other regular container
//! running is killed as kubelet kills the pod then ("Stopping container c", the pod's grace);
//! and kubelet's grace rules around the preStop hook (`setTerminationGracePeriod`,
//! `killContainer`): a grace of 0 skips the hook and the stop still gets the 2 s minimum.

use std::time::Duration;

use super::harness::*;
use crate::model::api_pod::{ContainerKind, Hook, RestartPolicy};
use crate::publish::event::EventKind;
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

/// The `Killing` texts and stop graces of a kill of `c` (a second regular container `d` runs
/// beside it when `two`).
async fn kill_of(
    ann: &str,
    ty: ProbeType,
    policy: Option<RestartPolicy>,
    kind: ContainerKind,
    two: bool,
) -> (Vec<String>, Vec<(String, i64)>) {
    let n = Node::steady().await;
    n.script.set("c", ty, failure(), Duration::ZERO);
    let mut cs = vec![running(&n.clock, "c1", "c", 0, S)];
    let mut specs = vec![("c", kind, None)];
    if two {
        cs.push(running(&n.clock, "d1", "d", 0, S));
        specs.push(("d", ContainerKind::Regular, None));
    }
    let p = pod("u", ann, cs);
    if let Some(policy) = policy {
        n.manager.set_api_pod(api_pod(&p, policy, Some(ann), specs));
    }
    n.manager.update_pod(p);
    run_for(3 * S).await;
    (killing(&n), n.kills.done.lock().clone())
}

async fn kill_text(
    ann: &str,
    ty: ProbeType,
    policy: Option<RestartPolicy>,
    kind: ContainerKind,
) -> Vec<String> {
    kill_of(ann, ty, policy, kind, false).await.0
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
            "Container c failed liveness probe, will be restarted if it exits non-zero",
        ),
        // A one-container Never pod: kubelet kills the pod.
        (
            LIVE,
            ProbeType::Liveness,
            Some(RestartPolicy::Never),
            regular,
            "Stopping container c",
        ),
        (
            STARTUP,
            ProbeType::Startup,
            Some(RestartPolicy::Never),
            regular,
            "Stopping container c",
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

#[tokio::test(start_paused = true)]
async fn a_hook_delivered_over_the_http_fallback_is_kubelets_warning_on_the_pod_and_the_stop_goes_on()
 {
    let n = Node::steady().await;
    *n.hooks.fallback.lock() = Some("10.1.0.5:8443".into());
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    let p = pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE),
        vec![(
            "c",
            ContainerKind::Regular,
            Some(Hook::Sleep(Duration::from_secs(1))),
        )],
    ));
    n.manager.update_pod(p);
    run_for(5 * S).await;
    assert_eq!(n.kills.done.lock().clone(), vec![("c1".to_owned(), 30)]);
    assert_eq!(n.metrics.lifecycle_http_fallbacks.get(), 1);
    let recorded: Vec<(String, &'static str, String)> = n
        .seen
        .0
        .lock()
        .iter()
        .filter_map(|e| {
            e.recorded()
                .map(|r| (e.container_name.clone(), r.reason, r.message))
        })
        .filter(|(_, reason, _)| *reason != "Unhealthy")
        .collect();
    assert_eq!(
        recorded,
        vec![
            (
                "c".to_owned(),
                "Killing",
                "Container c failed liveness probe, will be restarted".to_owned()
            ),
            (
                String::new(),
                "LifecycleHTTPFallback",
                "request to HTTPS lifecycle hook 10.1.0.5:8443 got HTTP response, retry with HTTP succeeded"
                    .to_owned()
            ),
        ]
    );
}

const LIVE_GRACE_5: &str = r#"{"c":{"livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1,"terminationGracePeriodSeconds":5}}}"#;

#[tokio::test(start_paused = true)]
async fn a_never_pods_kill_is_kubelets_pod_kill_unless_another_container_runs() {
    let regular = ContainerKind::Regular;
    let never = Some(RestartPolicy::Never);
    // Alone: kubelet kills the pod, with the pod's grace (30 s), not the probe's (5 s).
    let (texts, stops) = kill_of(LIVE_GRACE_5, ProbeType::Liveness, never, regular, false).await;
    assert_eq!(texts, vec!["Stopping container c".to_owned()]);
    assert_eq!(stops, vec![("c1".to_owned(), 30)]);
    // Beside a running container: kubelet kills this one, with the probe's grace.
    let (texts, stops) = kill_of(LIVE_GRACE_5, ProbeType::Liveness, never, regular, true).await;
    assert_eq!(texts, vec!["Container c failed liveness probe".to_owned()]);
    assert_eq!(stops, vec![("c1".to_owned(), 5)]);
}
