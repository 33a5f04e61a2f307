//! The starvation rule: a probe that reached its timeout while the prober itself was starved is
//! recorded Unknown, counted in `podward_prober_probes_starved_total` and run again at once
//! (a bounded number of times), never counted as a failure; a target that is slow while the
//! prober is not starved fails exactly as it does without the measure. The starvation measure
//! is the seam: a window of (paused) time during which the fake meter says the prober was
//! starved.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::harness::*;
use crate::model::outcome::ProbeResult;
use crate::pods::manager::Settings;
use crate::probing::starvation::StarvationMeter;
use crate::probing::worker::MAX_STARVED_RETRIES;
use crate::spec::ProbeType;

/// Starved from `from` to `to`, not otherwise.
struct Window {
    from: Instant,
    to: Instant,
}

impl StarvationMeter for Window {
    fn starved(&self) -> Duration {
        Instant::now()
            .min(self.to)
            .saturating_duration_since(self.from)
    }
}

/// A liveness probe with a 1 s timeout, period 10 s and failure threshold 1: one counted failure
/// is a kill.
const SPEC: &str = r#"{"c":{"livenessProbe":{"httpGet":{"port":80},"timeoutSeconds":1,"periodSeconds":10,"failureThreshold":1}}}"#;

/// A steady node whose prober is starved from now for `starved`.
async fn starving(starved: Duration) -> Node {
    Node::steady_with(|| {
        let from = Instant::now();
        Settings {
            starvation: Some(Arc::new(Window {
                from,
                to: from + starved,
            })),
            ..Settings::default()
        }
    })
    .await
}

fn starved_count(n: &Node) -> u64 {
    n.metrics
        .probes_starved
        .with_label_values(&["Liveness"])
        .get()
}

fn probe_status(n: &Node) -> podward_api::prober::v1::ProbeStatus {
    n.manager.view().status(Some("u")).pods[0].containers[0].probes[0].clone()
}

#[tokio::test(start_paused = true)]
async fn a_timeout_while_the_prober_was_starved_is_unknown_and_retried_at_once() {
    // Starved for the whole first probe, which fails by its timeout; the retry is not starved.
    let n = starving(S).await;
    n.script.set("c", ProbeType::Liveness, success(), S);
    n.script.queue("c", ProbeType::Liveness, vec![failure()]);
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(5 * S).await;
    let calls = n.script.calls_of(ProbeType::Liveness);
    assert_eq!(
        calls.len(),
        2,
        "the starved probe is run again, once: {calls:?}"
    );
    assert_eq!(
        calls[1].at - calls[0].at,
        S,
        "again at once, not at the next period"
    );
    assert!(
        n.kills.done.lock().is_empty(),
        "a starved timeout is no failure"
    );
    assert_eq!(
        n.metrics.series().totals(),
        (1, 0),
        "(successes, failures) counted"
    );
    assert_eq!(starved_count(&n), 1);
    assert_eq!(
        n.result("c1", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
    let p = probe_status(&n);
    assert_eq!(p.consecutive_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_slow_target_while_the_prober_is_not_starved_fails_as_before() {
    // The meter is there, but reports no starvation.
    let n = starving(Duration::ZERO).await;
    n.script.set("c", ProbeType::Liveness, failure(), S);
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(5 * S).await;
    assert_eq!(n.script.calls_of(ProbeType::Liveness).len(), 1);
    assert_eq!(n.kills.done.lock().len(), 1, "a slow target is a failure");
    assert_eq!(n.metrics.series().totals(), (0, 1));
    assert_eq!(starved_count(&n), 0);
}

#[tokio::test(start_paused = true)]
async fn a_quick_failure_while_starved_is_still_a_failure() {
    let n = starving(1000 * S).await;
    // Refused at once: the target's answer, whatever the prober's load.
    n.script.set("c", ProbeType::Liveness, failure(), 10 * MS);
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(5 * S).await;
    assert_eq!(n.kills.done.lock().len(), 1);
    assert_eq!(starved_count(&n), 0);
}

#[tokio::test(start_paused = true)]
async fn starved_retries_are_bounded_and_the_probe_is_then_discarded() {
    let n = starving(1000 * S).await;
    n.script.set("c", ProbeType::Liveness, failure(), S);
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(5 * S).await;
    let runs = 1 + MAX_STARVED_RETRIES as usize;
    assert_eq!(n.script.calls_of(ProbeType::Liveness).len(), runs);
    assert_eq!(starved_count(&n), runs as u64);
    assert!(n.kills.done.lock().is_empty());
    assert_eq!(n.metrics.series().totals(), (0, 0));
    let p = probe_status(&n);
    assert_eq!(p.consecutive_failures, 0);
    assert!(p.last_output.contains("starved"), "{p:?}");
    // The next period probes again (and is starved again).
    run_for(10 * S).await;
    assert_eq!(n.script.calls_of(ProbeType::Liveness).len(), 2 * runs);
    assert!(n.kills.done.lock().is_empty());
}
