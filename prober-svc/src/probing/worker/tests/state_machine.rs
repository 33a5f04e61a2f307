//! A1–A9: initial values, initial delay, period, thresholds, on-hold, startup gating, manual
//! trigger, discarded errors, warnings.

use std::time::Duration;

use super::harness::*;
use crate::model::outcome::Outcome;
use crate::model::outcome::ProbeResult;
use crate::spec::ProbeType;

const ALL3: &str = r#"{"c":{
  "livenessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":10,"periodSeconds":1},
  "readinessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":10,"periodSeconds":1},
  "startupProbe":{"exec":{"command":["true"]},"initialDelaySeconds":10,"periodSeconds":1}}}"#;

#[tokio::test(start_paused = true)]
async fn a1_initial_values_hold_until_the_first_probe() {
    let n = Node::steady().await;
    n.manager
        .update_pod(pod("u", ALL3, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(2 * S).await;
    assert!(
        n.script.calls.lock().is_empty(),
        "no probe during initialDelay"
    );
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Failure)
    );
    assert_eq!(
        n.result("c1", ProbeType::Startup),
        Some(ProbeResult::Unknown)
    );
    assert_eq!(n.flags("u", "c"), (false, false, true));
}

#[tokio::test(start_paused = true)]
async fn a2_initial_delay_uses_a_truncating_compare_against_started_at() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":5,"periodSeconds":1}}}"#;
    // Started 3.5 s ago: the first probe is due when int(seconds since start) reaches 5, i.e. at
    // the first tick after 1.5 s more. Ticks come every second from the worker's start.
    n.manager.update_pod(pod(
        "u",
        spec,
        vec![running(&n.clock, "c1", "c", 0, Duration::from_millis(3500))],
    ));
    let t0 = tokio::time::Instant::now();
    run_for(10 * S).await;
    let calls = n.script.calls_of(ProbeType::Readiness);
    let first = calls.first().expect("probed").at - t0;
    // Tick at +1 s: 4.5 s since start -> int 4 < 5, skipped. Tick at +2 s: 5.5 -> 5, probes.
    assert_eq!(
        first,
        2 * S,
        "first probe at the first tick with int(since start) >= 5"
    );
    assert_eq!(
        n.result("c1", ProbeType::Readiness),
        Some(ProbeResult::Success)
    );
}

#[tokio::test(start_paused = true)]
async fn a3_fixed_rate_ticker_drops_missed_ticks_and_never_overlaps() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":10,"timeoutSeconds":30}}}"#;
    n.script
        .set("c", ProbeType::Readiness, success(), Duration::from_secs(3));
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    let t0 = tokio::time::Instant::now();
    run_for(35 * S).await;
    let at: Vec<Duration> = n
        .script
        .calls_of(ProbeType::Readiness)
        .iter()
        .map(|c| c.at - t0)
        .collect();
    // A 3 s probe does not push the schedule: starts stay on the 10 s grid (Go's ticker).
    assert_eq!(at, vec![Duration::ZERO, 10 * S, 20 * S, 30 * S]);

    // Now a probe that overruns 2.5 periods: the one buffered tick fires at once, the others
    // are dropped, and the schedule realigns to the grid.
    n.script.set(
        "c",
        ProbeType::Readiness,
        success(),
        Duration::from_secs(25),
    );
    n.script.calls.lock().clear();
    run_for(75 * S).await;
    let at: Vec<Duration> = n
        .script
        .calls_of(ProbeType::Readiness)
        .iter()
        .map(|c| c.at - t0)
        .collect();
    assert_eq!(at[0], 40 * S);
    assert_eq!(
        at[1],
        65 * S,
        "buffered tick fires right after the long probe"
    );
    assert_eq!(
        at[2],
        90 * S,
        "then back on the 10 s grid, skipping ticks 50..80"
    );
    assert_eq!(
        n.script
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a4_thresholds_count_consecutive_results() {
    let n = Node::steady().await;
    // Readiness FT3/ST3.
    let spec = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1,"failureThreshold":3,"successThreshold":3}}}"#;
    n.script.queue(
        "c",
        ProbeType::Readiness,
        vec![
            success(),
            success(),
            failure(),
            success(),
            success(),
            success(),
            failure(),
            failure(),
            failure(),
        ],
    );
    n.script
        .set("c", ProbeType::Readiness, failure(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    let mut seen = Vec::new();
    for _ in 0..9 {
        run_for(MS).await;
        seen.push(n.result("c1", ProbeType::Readiness));
        run_for(S - MS).await;
    }
    use ProbeResult::{Failure as F, Success as Su};
    // S,S (2 < 3: stays F), F (run reset), S,S,S (3rd: Success), F,F (2 < 3: stays S), F -> F.
    let want = [F, F, F, F, F, Su, Su, Su, F].map(Some);
    assert_eq!(seen, want);
}

#[tokio::test(start_paused = true)]
async fn a5_liveness_failure_kills_once_then_holds_until_a_new_container() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"livenessProbe":{"exec":{"command":["cat","/tmp/health"]},"periodSeconds":1,"failureThreshold":3,"terminationGracePeriodSeconds":7}}}"#;
    n.script.queue(
        "c",
        ProbeType::Liveness,
        vec![success(), failure(), failure()],
    );
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(2 * S + MS).await; // S, F, F: still Success (2 < FT3)
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert!(n.kills.done.lock().is_empty());
    run_for(S).await; // third F
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Failure)
    );
    assert_eq!(
        *n.kills.done.lock(),
        vec![("c1".to_owned(), 7)],
        "probe-level grace wins"
    );
    let probes_at_kill = n.script.calls_of(ProbeType::Liveness).len();
    run_for(10 * S).await;
    assert_eq!(
        n.script.calls_of(ProbeType::Liveness).len(),
        probes_at_kill,
        "on hold: no probes"
    );
    assert_eq!(n.kills.done.lock().len(), 1, "never killed twice");

    // kubelet restarts it: a new container ID resumes with the initial value and a full budget.
    n.script
        .queue("c", ProbeType::Liveness, vec![failure(), failure()]);
    n.script
        .set("c", ProbeType::Liveness, success(), Duration::ZERO);
    n.manager.update_pod(pod(
        "u",
        spec,
        vec![running(&n.clock, "c2", "c", 1, Duration::ZERO)],
    ));
    run_for(3 * S).await;
    assert_eq!(
        n.result("c2", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        None,
        "old instance's result removed"
    );
    assert_eq!(
        n.kills.done.lock().len(),
        1,
        "two failures < FT3 on the new instance"
    );
}

#[tokio::test(start_paused = true)]
async fn a6_startup_gates_the_others_and_never_reruns_once_started() {
    let n = Node::steady().await;
    let spec = r#"{"c":{
      "livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1},
      "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1},
      "startupProbe":{"exec":{"command":["cat","/tmp/startup"]},"periodSeconds":1,"failureThreshold":60}}}"#;
    n.script
        .set("c", ProbeType::Startup, failure(), Duration::ZERO);
    n.script
        .set("c", ProbeType::Liveness, failure(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(20 * S).await;
    assert!(
        n.script.calls_of(ProbeType::Liveness).is_empty(),
        "liveness waits for startup"
    );
    assert!(
        n.script.calls_of(ProbeType::Readiness).is_empty(),
        "readiness waits for startup"
    );
    assert_eq!(
        n.result("c1", ProbeType::Startup),
        Some(ProbeResult::Unknown),
        "below FT: still unknown"
    );
    assert!(n.kills.done.lock().is_empty());
    assert_eq!(n.flags("u", "c"), (false, false, true));

    n.script
        .set("c", ProbeType::Startup, success(), Duration::ZERO);
    run_for(S + MS).await;
    assert_eq!(
        n.result("c1", ProbeType::Startup),
        Some(ProbeResult::Success)
    );
    let startups = n.script.calls_of(ProbeType::Startup).len();
    run_for(5 * S).await;
    assert_eq!(
        n.script.calls_of(ProbeType::Startup).len(),
        startups,
        "startup never reruns"
    );
    assert_eq!(
        n.kills.done.lock().len(),
        1,
        "liveness (FT1) now runs and kills"
    );
}

#[tokio::test(start_paused = true)]
async fn a6_startup_failure_at_threshold_kills_with_pod_grace() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"startupProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":3}}}"#;
    n.script
        .set("c", ProbeType::Startup, failure(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(S + MS).await; // probes at 0 s and 1 s: 2 < FT3
    assert_eq!(
        n.result("c1", ProbeType::Startup),
        Some(ProbeResult::Unknown)
    );
    run_for(S).await; // third failure at 2 s
    assert_eq!(
        n.result("c1", ProbeType::Startup),
        Some(ProbeResult::Failure)
    );
    assert_eq!(
        *n.kills.done.lock(),
        vec![("c1".to_owned(), 30)],
        "pod grace from the annotation"
    );
    run_for(5 * S).await;
    assert_eq!(
        n.script.calls_of(ProbeType::Startup).len(),
        3,
        "on hold after the verdict"
    );
}

#[tokio::test(start_paused = true)]
async fn a7_readiness_is_probed_right_after_startup_succeeds() {
    let n = Node::steady().await;
    let spec = r#"{"c":{
      "readinessProbe":{"exec":{"command":["cat","/tmp/health"]},"periodSeconds":30},
      "startupProbe":{"exec":{"command":["cat","/tmp/startup"]},"periodSeconds":5,"failureThreshold":120}}}"#;
    n.script
        .set("c", ProbeType::Startup, failure(), Duration::ZERO);
    n.manager.update_pod(pod(
        "u",
        spec,
        vec![running(&n.clock, "c1", "c", 0, Duration::ZERO)],
    ));
    let t0 = tokio::time::Instant::now();
    run_for(31 * S).await;
    assert_eq!(n.flags("u", "c"), (false, false, true));
    n.script
        .set("c", ProbeType::Startup, success(), Duration::ZERO);
    run_for(5 * S).await; // startup succeeds at the 35 s tick
    let r = n.script.calls_of(ProbeType::Readiness);
    assert_eq!(r.len(), 1, "one readiness probe, triggered");
    assert_eq!(
        r[0].at - t0,
        35 * S,
        "at the moment startup succeeded, not at the 60 s tick"
    );
    assert_eq!(n.flags("u", "c"), (true, true, true));
    // The trigger reset the ticker: the next readiness probe is a full period later.
    run_for(30 * S + MS).await;
    let r = n.script.calls_of(ProbeType::Readiness);
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].at - t0, 65 * S);
}

#[tokio::test(start_paused = true)]
async fn a8_errored_probes_are_discarded_without_touching_counters() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"livenessProbe":{"exec":{"command":["x"]},"periodSeconds":1,"failureThreshold":2}}}"#;
    n.script.queue(
        "c",
        ProbeType::Liveness,
        vec![failure(), errored(), errored(), failure()],
    );
    n.script
        .set("c", ProbeType::Liveness, success(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(2 * S + MS).await; // F, E, E: run stays 1
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    let st = n.manager.view().status(Some("u"));
    let probe = &st.pods[0].containers[0].probes[0];
    assert_eq!(probe.consecutive_failures, 1, "errors did not count");
    assert_eq!(probe.probes_run, 1, "errors are not results");
    run_for(S).await; // second F: consecutive with the first, errors in between ignored
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Failure)
    );
    assert_eq!(n.kills.done.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a8_a_probe_that_always_errors_never_fails_liveness_nor_becomes_ready() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"livenessProbe":{"httpGet":{"port":"http"},"periodSeconds":1,"failureThreshold":1},
                        "readinessProbe":{"httpGet":{"port":"http"},"periodSeconds":1}}}"#;
    n.script
        .set("c", ProbeType::Liveness, errored(), Duration::ZERO);
    n.script
        .set("c", ProbeType::Readiness, errored(), Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(10 * S).await;
    assert!(n.kills.done.lock().is_empty());
    assert_eq!(n.flags("u", "c"), (true, false, true));
}

#[tokio::test(start_paused = true)]
async fn a9_a_warning_counts_as_success() {
    let n = Node::steady().await;
    let spec =
        r#"{"c":{"livenessProbe":{"httpGet":{"port":80},"periodSeconds":1,"failureThreshold":1}}}"#;
    let warning = Outcome::Warning(
        "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>.".into(),
    );
    n.script
        .set("c", ProbeType::Liveness, warning, Duration::ZERO);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(5 * S).await;
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    assert!(n.kills.done.lock().is_empty());
}
