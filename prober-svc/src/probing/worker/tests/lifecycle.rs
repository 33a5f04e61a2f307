//! A10–A15 and the Watch/Status side: non-running containers, pod removal, termination, prober
//! restart (jitter, no false kill), idempotent add/remove, published changes.

use std::time::Duration;

use podward_api::prober::v1 as api;

use super::harness::*;
use crate::model::RunState;
use crate::model::outcome::ProbeResult;
use crate::spec::ProbeType;

const LIVE_READY: &str = r#"{"c":{
  "livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1,"failureThreshold":3},
  "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

#[tokio::test(start_paused = true)]
async fn a10_a_non_running_container_is_failure_without_a_kill_and_the_worker_stays() {
    let n = Node::steady().await;
    let mut c = running(&n.clock, "c1", "c", 0, S);
    c.state = RunState::Exited;
    n.manager.update_pod(pod("u", LIVE_READY, vec![c]));
    run_for(3 * S).await;
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Failure)
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Failure)
    );
    assert!(
        n.script.calls.lock().is_empty(),
        "no probe of a dead container"
    );
    assert!(
        n.kills.done.lock().is_empty(),
        "a dead container is not killed"
    );
    assert_eq!(
        n.manager.registry().worker_count(),
        2,
        "workers wait for the next instance"
    );
    n.manager.update_pod(pod(
        "u",
        LIVE_READY,
        vec![running(&n.clock, "c2", "c", 1, Duration::ZERO)],
    ));
    run_for(2 * S).await;
    assert_eq!(
        n.result("c2", ProbeType::Readiness),
        Some(ProbeResult::Success)
    );
    assert_eq!(n.flags("u", "c"), (true, true, true));
}

#[tokio::test(start_paused = true)]
async fn a11_removing_a_pod_stops_workers_and_forgets_results() {
    let n = Node::steady().await;
    n.manager.update_pod(pod(
        "u",
        LIVE_READY,
        vec![running(&n.clock, "c1", "c", 0, S)],
    ));
    run_for(2 * S).await;
    assert_eq!(n.manager.registry().worker_count(), 2);
    assert!(n.manager.remove_pod("u"));
    assert!(!n.manager.remove_pod("u"), "idempotent");
    run_for(S).await;
    assert_eq!(n.manager.registry().worker_count(), 0);
    assert!(
        n.manager.view().results().is_empty(),
        "exited workers removed their results"
    );
    let calls = n.script.calls.lock().len();
    run_for(5 * S).await;
    assert_eq!(
        n.script.calls.lock().len(),
        calls,
        "no probes after removal"
    );
    assert!(n.manager.view().status(None).pods.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a12_termination_stops_liveness_and_keeps_readiness_probing() {
    let n = Node::steady().await;
    n.manager.update_pod(pod(
        "u",
        LIVE_READY,
        vec![running(&n.clock, "c1", "c", 0, S)],
    ));
    run_for(2 * S).await;
    // kubelet asks to stop the pod; the app starts failing both probes.
    let mut p = pod(
        "u",
        LIVE_READY,
        vec![running(&n.clock, "c1", "c", 0, 3 * S)],
    );
    p.stop_requested_at_ns = n.clock.now_ns();
    n.manager.update_pod(p);
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    n.script
        .set("c", ProbeType::Readiness, failure(), Duration::ZERO);
    let before = n.script.calls_of(ProbeType::Liveness).len();
    run_for(10 * S).await;
    assert!(
        n.script.calls_of(ProbeType::Liveness).len() <= before + 1,
        "liveness stopped"
    );
    assert!(
        n.kills.done.lock().is_empty(),
        "no liveness kill during termination"
    );
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Failure),
        "readiness still probes"
    );
    assert_eq!(n.flags("u", "c"), (true, false, true));
}

#[tokio::test(start_paused = true)]
async fn a12b_a_liveness_failure_that_ends_after_termination_began_is_discarded() {
    // A liveness probe is in flight when kubelet asks to stop the pod, and the app's TERM
    // handler makes it fail: kubelet stops liveness at termination and never acts on that
    // result, so neither may the prober (no Failure recorded, no kill, still live).
    let n = Node::steady().await;
    let spec = r#"{"c":{"livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1,"failureThreshold":1}}}"#;
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(2 * S).await;
    n.script.set(
        "c",
        ProbeType::Liveness,
        failure(),
        Duration::from_millis(800),
    );
    let before = n.script.calls_of(ProbeType::Liveness).len();
    // Wait until the slow failing probe has started, then begin termination under it.
    while n.script.calls_of(ProbeType::Liveness).len() == before {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut p = pod("u", spec, vec![running(&n.clock, "c1", "c", 0, 3 * S)]);
    p.stop_requested_at_ns = n.clock.now_ns();
    n.manager.update_pod(p);
    run_for(5 * S).await;
    assert!(
        n.kills.done.lock().is_empty(),
        "no kill from a probe that ended during termination"
    );
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert!(n.flags("u", "c").0, "still live");
}

#[tokio::test(start_paused = true)]
async fn a13_after_a_prober_restart_first_probes_are_jittered_within_one_period() {
    // The prober started 0.5 s ago; periods of 10 s spread the first probes over [0, 10 s).
    let n = Node::started(Duration::from_millis(500)).await;
    let spec = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":10}}}"#;
    let t0 = tokio::time::Instant::now();
    for i in 0..50 {
        let uid = format!("u{i}");
        n.manager.update_pod(pod(
            &uid,
            spec,
            vec![running(&n.clock, &format!("c{i}"), "c", 0, S)],
        ));
    }
    // A worker starts a timer tick after `update_pod` returns, so its period ends a little
    // after t0 + 10 s: look that much further and take each container's first probe only (one
    // jittered by a few ms has its second probe inside that margin).
    let period_end = 10 * S + 5 * MS;
    run_for(period_end).await;
    let mut first = std::collections::BTreeMap::new();
    for c in n.script.calls_of(ProbeType::Readiness) {
        first.entry(c.container_id).or_insert(c.at - t0);
    }
    let at: Vec<Duration> = first.into_values().collect();
    assert_eq!(at.len(), 50, "each probed in the first period: {at:?}");
    assert!(at.iter().all(|d| *d < period_end));
    let distinct: std::collections::BTreeSet<_> = at.iter().collect();
    assert!(distinct.len() > 10, "spread, not all at once: {at:?}");
}

#[tokio::test(start_paused = true)]
async fn a13_no_jitter_once_the_prober_has_run_a_period() {
    let n = Node::started(Duration::from_secs(11)).await;
    let spec = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":10}}}"#;
    let t0 = tokio::time::Instant::now();
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(MS).await;
    let calls = n.script.calls_of(ProbeType::Readiness);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].at, t0, "first probe at once");
}

#[tokio::test(start_paused = true)]
async fn a13_restarted_prober_keeps_old_containers_ready_and_needs_a_full_failure_run() {
    let n = Node::started(Duration::from_secs(1)).await;
    let spec = r#"{"c":{
      "livenessProbe":{"exec":{"command":["x"]},"periodSeconds":1,"failureThreshold":3},
      "readinessProbe":{"exec":{"command":["x"]},"periodSeconds":1,"failureThreshold":3},
      "startupProbe":{"exec":{"command":["x"]},"periodSeconds":1}}}"#;
    // The container ran long before this prober instance (the previous one was kill -9'ed).
    let c = running(&n.clock, "c1", "c", 0, Duration::from_secs(600));
    n.manager.update_pod(pod("u", spec, vec![c]));
    assert_eq!(
        n.flags("u", "c"),
        (true, true, true),
        "no NotReady flip on prober restart"
    );
    // Two failures after the restart are not enough for anything.
    n.script
        .queue("c", ProbeType::Liveness, vec![failure(), failure()]);
    n.script
        .queue("c", ProbeType::Readiness, vec![failure(), failure()]);
    run_for(3 * S).await;
    assert!(n.kills.done.lock().is_empty(), "fresh counters: no kill");
    assert_eq!(n.flags("u", "c"), (true, true, true));
    assert!(
        n.script.calls_of(ProbeType::Startup).is_empty(),
        "an old container counts as started"
    );
}

#[tokio::test(start_paused = true)]
async fn a14_add_is_idempotent_spec_updates_are_ignored_and_cleanup_is_selective() {
    let n = Node::steady().await;
    n.manager.update_pod(pod(
        "a",
        LIVE_READY,
        vec![running(&n.clock, "a1", "c", 0, S)],
    ));
    n.manager.update_pod(pod(
        "b",
        LIVE_READY,
        vec![running(&n.clock, "b1", "c", 0, S)],
    ));
    let changed = r#"{"c":{"startupProbe":{"exec":{"command":["true"]}}}}"#;
    n.manager
        .update_pod(pod("a", changed, vec![running(&n.clock, "a1", "c", 0, S)]));
    assert_eq!(
        n.manager.registry().worker_count(),
        4,
        "re-adding and spec changes create nothing"
    );
    for _ in 0..10 {
        assert!(n.manager.cleanup(&["zzz".into()]).is_empty());
    }
    assert_eq!(
        n.manager.cleanup(&["a".into(), "nope".into()]),
        vec!["a".to_owned()]
    );
    run_for(S).await;
    assert_eq!(n.manager.registry().worker_count(), 2);
    assert_eq!(n.manager.registry().pod_uids(), vec!["b".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn a14_a_bad_probe_is_reported_and_the_others_still_run() {
    let n = Node::steady().await;
    let spec = r#"{"bad":{"livenessProbe":{"exec":{"command":["x"]},"successThreshold":2}},
                   "good":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "g1", "good", 0, S)]));
    run_for(2 * S).await;
    let st = n.manager.view().status(Some("u"));
    let errs = &st.pods[0].spec_errors;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].container, "bad");
    assert!(errs[0].field.contains("successThreshold"), "{errs:?}");
    assert_eq!(
        n.result("g1", ProbeType::Readiness),
        Some(ProbeResult::Success)
    );
}

#[tokio::test(start_paused = true)]
async fn a15_every_named_container_gets_its_probes_sidecars_included() {
    // CRI does not say which container is a sidecar; kubelet gives sidecars all three probe
    // types, and so does the prober for every container the annotation names.
    let n = Node::steady().await;
    let spec = r#"{"sidecar":{"livenessProbe":{"exec":{"command":["true"]}},"readinessProbe":{"exec":{"command":["true"]}},"startupProbe":{"exec":{"command":["true"]}}},
                   "main":{"readinessProbe":{"exec":{"command":["true"]}}}}"#;
    n.manager.update_pod(pod(
        "u",
        spec,
        vec![
            running(&n.clock, "s1", "sidecar", 0, S),
            running(&n.clock, "m1", "main", 0, S),
        ],
    ));
    assert_eq!(n.manager.registry().worker_count(), 4);
}

#[tokio::test(start_paused = true)]
async fn watch_publishes_changes_only_and_kills() {
    let n = Node::steady().await;
    let mut rx = n.hub.subscribe();
    let spec = r#"{"c":{"livenessProbe":{"exec":{"command":["x"]},"periodSeconds":1,"failureThreshold":2}}}"#;
    n.script.queue(
        "c",
        ProbeType::Liveness,
        vec![success(), success(), success(), failure(), failure()],
    );
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(6 * S).await;
    let mut events = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        events.push(ev);
    }
    let kinds: Vec<_> = events.iter().map(|e| e.event.clone()).collect();
    use api::probe_event::Event;
    assert_eq!(kinds.len(), 3, "{events:?}");
    assert_eq!(
        kinds[0],
        Some(Event::Result(api::ProbeResult::Success as i32)),
        "initial value"
    );
    assert_eq!(
        kinds[1],
        Some(Event::Result(api::ProbeResult::Failure as i32))
    );
    let Some(Event::Kill(k)) = &kinds[2] else {
        panic!("kill event: {events:?}")
    };
    assert_eq!(k.container_id, "c1");
    assert_eq!(k.grace_period_seconds, 30);
    assert!(k.output.contains("/tmp/health"), "{k:?}");
    assert!(
        events.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "gapless sequence"
    );
    let st = n.manager.view().status(Some("u"));
    assert_eq!(st.pods[0].containers[0].kills, 1);
    assert_eq!(
        st.pods[0].containers[0]
            .last_kill
            .as_ref()
            .map(|k| k.container_id.as_str()),
        Some("c1")
    );
}
