//! With the Kubernetes API's view of a pod (`ApiPod`): restart policy and sidecars, phase,
//! deletion, the API's annotation winning and edits applying to a running pod, the readiness the
//! gate sees (restart-safe), kubelet's events, and preStop hooks before kills.

use std::time::Duration;

use super::harness::*;
use crate::model::RunState;
use crate::model::api_pod::{ContainerKind, Hook, PodPhase, RestartPolicy};
use crate::model::outcome::Outcome;
use crate::model::outcome::ProbeResult;
use crate::pods::view::readiness::{PodReadiness, REASON_READINESS};
use crate::publish::event::EventKind;
use crate::spec::ProbeType;

const LIVE_READY: &str = r#"{"c":{
  "livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1,"failureThreshold":3},
  "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

const LIVE: &str = r#"{"c":{"livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1,"failureThreshold":2}}}"#;

fn regular() -> Vec<(&'static str, ContainerKind, Option<Hook>)> {
    vec![("c", ContainerKind::Regular, None)]
}

#[tokio::test(start_paused = true)]
async fn an_exited_container_of_a_never_pod_ends_its_workers_as_in_kubelet() {
    let n = Node::steady().await;
    let mut c = running(&n.clock, "c1", "c", 0, S);
    c.state = RunState::Exited;
    let p = pod("u", LIVE_READY, vec![c]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Never,
        Some(LIVE_READY),
        regular(),
    ));
    n.manager.update_pod(p);
    run_for(3 * S).await;
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        None,
        "the worker published Failure, then ended and took its result along"
    );
    assert_eq!(
        n.manager.registry().worker_count(),
        0,
        "no worker waits for a restart that never comes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_ended_is_not_started_again_by_later_news_of_its_pod() {
    let n = Node::steady().await;
    let mut c = running(&n.clock, "c1", "c", 0, S);
    c.state = RunState::Exited;
    let p = pod("u", LIVE_READY, vec![c]);
    let api = api_pod(&p, RestartPolicy::Never, Some(LIVE_READY), regular());
    n.manager.set_api_pod(api.clone());
    n.manager.update_pod(p.clone());
    run_for(3 * S).await;
    assert_eq!(n.manager.registry().worker_count(), 0, "both ended");
    let events = n.seen.0.lock().len();
    assert!(events > 0, "the ended workers published their results");
    // The same pod again, from CRI and from the API: nothing for the ended workers to do.
    n.manager.update_pod(p);
    n.manager.set_api_pod(api);
    run_for(3 * S).await;
    assert_eq!(
        n.seen.0.lock().len(),
        events,
        "no worker started again to publish the same results"
    );
    assert_eq!(n.manager.registry().worker_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn on_failure_pods_and_sidecars_of_never_pods_keep_their_workers() {
    for (policy, kind) in [
        (RestartPolicy::OnFailure, ContainerKind::Regular),
        (RestartPolicy::Never, ContainerKind::Sidecar),
    ] {
        let n = Node::steady().await;
        let mut c = running(&n.clock, "c1", "c", 0, S);
        c.state = RunState::Exited;
        let p = pod("u", LIVE_READY, vec![c]);
        n.manager.set_api_pod(api_pod(
            &p,
            policy,
            Some(LIVE_READY),
            vec![("c", kind, None)],
        ));
        n.manager.update_pod(p);
        run_for(3 * S).await;
        assert_eq!(
            n.manager.registry().worker_count(),
            2,
            "{policy:?} {kind:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_succeeded_or_failed_pod_ends_every_worker() {
    let n = Node::steady().await;
    let p = pod("u", LIVE_READY, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.update_pod(p.clone());
    run_for(2 * S).await;
    assert_eq!(n.manager.registry().worker_count(), 2);
    let mut api = api_pod(&p, RestartPolicy::Never, Some(LIVE_READY), regular());
    api.phase = PodPhase::Succeeded;
    n.manager.set_api_pod(api);
    run_for(2 * S).await;
    assert_eq!(n.manager.registry().worker_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_apis_deletion_timestamp_is_termination_liveness_stops_readiness_goes_on() {
    let n = Node::steady().await;
    let p = pod("u", LIVE_READY, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.update_pod(p.clone());
    run_for(2 * S).await;
    let mut api = api_pod(&p, RestartPolicy::Always, Some(LIVE_READY), regular());
    api.deleting = true;
    n.manager.set_api_pod(api);
    run_for(2 * S).await;
    let before = n.script.calls_of(ProbeType::Liveness).len();
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    n.script
        .set("c", ProbeType::Readiness, failure(), Duration::ZERO);
    run_for(5 * S).await;
    assert_eq!(
        n.script.calls_of(ProbeType::Liveness).len(),
        before,
        "liveness stopped"
    );
    assert!(
        n.kills.done.lock().is_empty(),
        "no kill of a terminating pod"
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Failure),
        "readiness keeps probing, the pod goes NotReady"
    );
}

#[tokio::test(start_paused = true)]
async fn the_apis_annotation_wins_and_an_edit_applies_to_the_running_pod() {
    let n = Node::steady().await;
    let cri = r#"{"c":{"livenessProbe":{"exec":{"command":["old"]},"periodSeconds":1}}}"#;
    let p = pod("u", cri, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE_READY),
        regular(),
    ));
    n.manager.update_pod(p.clone());
    assert_eq!(
        n.manager.registry().worker_count(),
        2,
        "the API's copy: liveness + readiness"
    );
    run_for(2 * S).await;
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Success)
    );

    // Edit: readiness every 5 s instead of 1 s, liveness removed, startup added.
    let edited = r#"{"c":{
      "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":5},
      "startupProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;
    n.manager
        .set_api_pod(api_pod(&p, RestartPolicy::Always, Some(edited), regular()));
    assert_eq!(
        n.manager.registry().worker_count(),
        2,
        "readiness kept, liveness gone, startup added"
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Success),
        "an edit keeps the published readiness (same container)"
    );
    let before = n.script.calls_of(ProbeType::Readiness).len();
    run_for(10 * S + MS).await;
    let after = n.script.calls_of(ProbeType::Readiness).len() - before;
    assert!(
        (2..=4).contains(&after),
        "readiness now probes every 5 s: {after} in 10 s"
    );
    run_for(S).await;
    assert_eq!(n.manager.registry().worker_count(), 2);

    // The annotation removed through the API: no probes any more.
    n.manager
        .set_api_pod(api_pod(&p, RestartPolicy::Always, None, regular()));
    run_for(S).await;
    assert_eq!(n.manager.registry().worker_count(), 0);
    // ... and added back: probing starts again for the same running pod.
    n.manager
        .set_api_pod(api_pod(&p, RestartPolicy::Always, Some(LIVE), regular()));
    assert_eq!(n.manager.registry().worker_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn probes_named_for_a_plain_init_container_are_refused_with_a_spec_error() {
    let n = Node::steady().await;
    let ann = r#"{"setup":{"livenessProbe":{"exec":{"command":["true"]}}},
                 "proxy":{"livenessProbe":{"exec":{"command":["true"]}}}}"#;
    let p = pod("u", ann, vec![running(&n.clock, "p1", "proxy", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(ann),
        vec![
            ("setup", ContainerKind::Init, None),
            ("proxy", ContainerKind::Sidecar, None),
        ],
    ));
    n.manager.update_pod(p);
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "the sidecar is probed, the init container not"
    );
    let st = n.manager.view().status(Some("u"));
    let errs = &st.pods[0].spec_errors;
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].container, "setup");
    assert!(
        errs[0].message.contains("init containers"),
        "{}",
        errs[0].message
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_readiness_is_unknown_until_a_real_result_in_both_directions() {
    // The previous prober instance died; these containers ran long before this one started.
    for (answer, want) in [
        (success(), PodReadiness::Ready),
        (
            failure(),
            PodReadiness::NotReady {
                container: "c".into(),
                reason: REASON_READINESS,
                message: "container c: Readiness probe failed: cat: can't open '/tmp/health'"
                    .into(),
            },
        ),
    ] {
        let n = Node::started(Duration::from_secs(1)).await;
        let ann = r#"{"c":{"readinessProbe":{"exec":{"command":["x"]},"periodSeconds":10}}}"#;
        n.script
            .set("c", ProbeType::Readiness, answer, Duration::from_secs(3));
        let c = running(&n.clock, "c1", "c", 0, Duration::from_secs(600));
        n.manager.update_pod(pod("u", ann, vec![c]));
        assert_eq!(
            n.manager.view().readiness("u"),
            PodReadiness::Unknown,
            "no guess: the gate keeps whatever the API has"
        );
        // Jitter (< one period) plus the probe's own 3 s: still unknown meanwhile.
        run_for(2 * S).await;
        assert_eq!(n.manager.view().readiness("u"), PodReadiness::Unknown);
        // A success publishes at once (successThreshold 1); failures need failureThreshold (3)
        // in a row, so one or two failed probes leave it unknown too.
        run_for(12 * S).await;
        if want == PodReadiness::Ready {
            assert_eq!(n.manager.view().readiness("u"), want);
        } else {
            assert_eq!(
                n.manager.view().readiness("u"),
                PodReadiness::Unknown,
                "one failure is no result"
            );
            run_for(25 * S).await;
            assert_eq!(n.manager.view().readiness("u"), want);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_a_container_started_within_the_restart_grace_is_unknown_until_a_verdict() {
    // Started 2 s before this prober: kubelet's restart grace makes it "new" (initial value
    // Failure), but that is no result the gate may write; a verdict (a threshold) is.
    for (answer, ready) in [(success(), true), (failure(), false)] {
        let n = Node::started(Duration::from_secs(1)).await;
        let ann = r#"{"c":{"readinessProbe":{"exec":{"command":["x"]},"periodSeconds":1}}}"#;
        n.script
            .set("c", ProbeType::Readiness, answer, Duration::from_millis(10));
        let c = running(&n.clock, "c1", "c", 0, Duration::from_secs(3));
        n.manager.update_pod(pod("u", ann, vec![c]));
        run_for(MS).await;
        assert_eq!(n.manager.view().readiness("u"), PodReadiness::Unknown);
        // Two failures are below failureThreshold 3: still no verdict.
        run_for(2 * S).await;
        if ready {
            assert_eq!(n.manager.view().readiness("u"), PodReadiness::Ready);
        } else {
            assert_eq!(n.manager.view().readiness("u"), PodReadiness::Unknown);
            run_for(3 * S).await;
            assert!(
                matches!(
                    n.manager.view().readiness("u"),
                    PodReadiness::NotReady {
                        reason: REASON_READINESS,
                        ..
                    }
                ),
                "{:?}",
                n.manager.view().readiness("u")
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_container_is_not_ready_until_its_readiness_succeeds() {
    let n = Node::steady().await;
    let ann = r#"{"c":{"readinessProbe":{"exec":{"command":["x"]},"initialDelaySeconds":5,"periodSeconds":1},
                       "startupProbe":{"exec":{"command":["x"]},"initialDelaySeconds":2,"periodSeconds":1}}}"#;
    n.manager.update_pod(pod(
        "u",
        ann,
        vec![running(&n.clock, "c1", "c", 0, Duration::ZERO)],
    ));
    run_for(MS).await;
    assert!(
        matches!(
            n.manager.view().readiness("u"),
            PodReadiness::NotReady {
                reason: "StartupProbeNotSucceeded",
                ..
            }
        ),
        "{:?}",
        n.manager.view().readiness("u")
    );
    run_for(3 * S).await;
    assert!(
        matches!(n.manager.view().readiness("u"), PodReadiness::NotReady { reason: REASON_READINESS, ref message, .. } if message.ends_with("has not succeeded yet")),
        "{:?}",
        n.manager.view().readiness("u")
    );
    run_for(5 * S).await;
    assert_eq!(n.manager.view().readiness("u"), PodReadiness::Ready);
    assert_eq!(n.manager.view().readiness("nope"), PodReadiness::NotProbed);
}

#[tokio::test(start_paused = true)]
async fn every_failed_errored_or_warned_probe_is_an_event_below_the_threshold_too() {
    let n = Node::steady().await;
    n.script.queue(
        "c",
        ProbeType::Liveness,
        vec![failure(), errored(), success_with_warning()],
    );
    n.manager
        .update_pod(pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(4 * S).await;
    let probed: Vec<Outcome> = n
        .seen
        .0
        .lock()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Probed(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(probed.len(), 3, "{probed:?}");
    assert!(matches!(probed[0], Outcome::Failure(_)));
    assert!(matches!(probed[1], Outcome::Errored(_)));
    assert!(matches!(probed[2], Outcome::Warning(_)));
    assert!(
        n.kills.done.lock().is_empty(),
        "one failure is below the threshold of 2"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kill_records_killing_runs_the_prestop_hook_then_stops_with_the_grace_left() {
    let n = Node::steady().await;
    *n.hooks.takes.lock() = Duration::from_millis(4_500);
    let hook = Hook::Exec {
        command: vec!["sh".into(), "-c".into(), "drain".into()],
    };
    let p = pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE),
        vec![("c", ContainerKind::Regular, Some(hook.clone()))],
    ));
    n.manager.update_pod(p);
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    run_for(10 * S).await;
    let runs = n.hooks.runs.lock().clone();
    assert_eq!(runs.len(), 1, "one hook run");
    assert_eq!((runs[0].0.as_str(), &runs[0].1), ("c1", &hook));
    assert_eq!(
        runs[0].2,
        Duration::from_secs(30),
        "the hook gets the whole grace"
    );
    assert_eq!(
        n.kills.done.lock().clone(),
        vec![("c1".to_owned(), 26)],
        "30 s grace less the hook's 4 whole seconds"
    );
    let stopped = n.kills.at.lock()[0];
    assert!(
        stopped >= runs[0].3 + Duration::from_millis(4_500),
        "the stop waited for the hook"
    );
    let reasons: Vec<&'static str> = n
        .seen
        .0
        .lock()
        .iter()
        .filter_map(|e| e.recorded().map(|r| r.reason))
        .collect();
    assert_eq!(reasons, vec!["Unhealthy", "Unhealthy", "Killing"]);
}

#[tokio::test(start_paused = true)]
async fn a_failing_or_slow_hook_never_holds_the_stop_past_the_grace() {
    let n = Node::steady().await;
    *n.hooks.takes.lock() = Duration::from_secs(600);
    let p = pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE),
        vec![(
            "c",
            ContainerKind::Regular,
            Some(Hook::Sleep(Duration::from_secs(600))),
        )],
    ));
    n.manager.update_pod(p);
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    run_for(40 * S).await;
    assert_eq!(
        n.kills.done.lock().clone(),
        vec![("c1".to_owned(), 2)],
        "the hook used the whole grace: kubelet's 2 s minimum is left"
    );

    let n = Node::steady().await;
    *n.hooks.fails.lock() = true;
    let p = pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]);
    n.manager.set_api_pod(api_pod(
        &p,
        RestartPolicy::Always,
        Some(LIVE),
        vec![("c", ContainerKind::Regular, Some(Hook::Invalid("x".into())))],
    ));
    n.manager.update_pod(p);
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    run_for(5 * S).await;
    assert_eq!(n.kills.done.lock().clone(), vec![("c1".to_owned(), 30)]);
    let reasons: Vec<&'static str> = n
        .seen
        .0
        .lock()
        .iter()
        .filter_map(|e| e.recorded().map(|r| r.reason))
        .collect();
    assert_eq!(
        reasons,
        vec!["Unhealthy", "Unhealthy", "Killing", "FailedPreStopHook"]
    );
}

#[tokio::test(start_paused = true)]
async fn without_the_apis_view_a_kill_runs_no_hook() {
    let n = Node::steady().await;
    n.manager
        .update_pod(pod("u", LIVE, vec![running(&n.clock, "c1", "c", 0, S)]));
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    run_for(5 * S).await;
    assert!(n.hooks.runs.lock().is_empty());
    assert_eq!(n.kills.done.lock().clone(), vec![("c1".to_owned(), 30)]);
}
