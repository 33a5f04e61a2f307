//! The orphan rule with an injected clock: absent from the runtime in every pass for the grace
//! period (and in at least two passes); any sighting resets; a pod with a sandbox in any state
//! is never touched; `Plan` (preview) changes no history.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, planned, reconciler, sandbox};
use podward_api::housekeeper::v1::FindingKind;
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::runtime::RuntimeView;

const GRACE: Duration = Duration::from_secs(120);
const READY: &str = "00000000-0000-4000-8000-00000000000a";
const NOTREADY: &str = "00000000-0000-4000-8000-00000000000b";
const GONE: &str = "00000000-0000-4000-8000-00000000000c";

#[tokio::test]
async fn orphan_only_after_the_grace_counted_on_the_injected_clock() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(GRACE));

    let (p1, _) = r.pass(Mode::Act).await;
    assert!(p1.actions.is_empty());
    let waiting: Vec<_> = p1
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::Waiting)
        .collect();
    assert_eq!(
        waiting.len(),
        3,
        "cgroup, pod dir and log dir wait: {:?}",
        p1.findings
    );
    assert!(
        waiting[0]
            .reason
            .contains(&format!("no sandbox for uid {U1} in 1 pass over 0s")),
        "{}",
        waiting[0].reason
    );

    clock.advance(Duration::from_secs(60));
    let (p2, _) = r.pass(Mode::Act).await;
    assert!(p2.actions.is_empty(), "60s < 2m: {:?}", p2.actions);
    clock.advance(Duration::from_secs(59));
    let (p3, _) = r.pass(Mode::Act).await;
    assert!(p3.actions.is_empty(), "1m59s < 2m");
    assert!(act.calls().is_empty());

    clock.advance(Duration::from_secs(11));
    let (p4, _) = r.pass(Mode::Act).await;
    assert_eq!(p4.actions.len(), 3, "{:?}", p4.findings);
    for a in &p4.actions {
        assert!(
            a.evidence
                .iter()
                .any(|e| *e == format!("no sandbox for uid {U1} in 4 passes over 2m 10s")),
            "{:?}",
            a.evidence
        );
    }
    assert_eq!(act.calls(), planned(&p4));
}

#[tokio::test]
async fn a_sighting_in_the_runtime_resets_the_count() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(GRACE));
    r.pass(Mode::Act).await;
    clock.advance(Duration::from_secs(100));
    r.pass(Mode::Act).await;
    // The sandbox shows up (NotReady) for one pass.
    node.set_runtime(RuntimeView {
        sandboxes: vec![sandbox("s1", U1, 0, false)],
        containers: vec![],
        ..Default::default()
    });
    clock.advance(Duration::from_secs(10));
    let (seen, _) = r.pass(Mode::Act).await;
    assert!(
        seen.actions.is_empty() && seen.findings.is_empty(),
        "{seen:?}"
    );
    node.set_runtime(RuntimeView::default());
    clock.advance(Duration::from_secs(30));
    r.pass(Mode::Act).await;
    clock.advance(Duration::from_secs(100));
    let (p, _) = r.pass(Mode::Act).await;
    assert!(
        p.actions.is_empty(),
        "absent for 100s only since the sighting: {:?}",
        p.actions
    );
    clock.advance(Duration::from_secs(21));
    let (p, _) = r.pass(Mode::Act).await;
    assert_eq!(p.actions.len(), 3);
}

#[tokio::test]
async fn a_pod_whose_sandbox_exists_in_any_state_is_never_touched() {
    let node = FakeNode::new();
    node.leave_pod(READY);
    node.leave_pod(NOTREADY);
    node.leave_pod(GONE);
    node.set_runtime(RuntimeView {
        sandboxes: vec![
            sandbox("s1", READY, 0, true),
            sandbox("s2", NOTREADY, 3, false),
        ],
        containers: vec![],
        ..Default::default()
    });
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    for _ in 0..5 {
        clock.advance(Duration::from_secs(600));
        let (p, _) = r.pass(Mode::Act).await;
        assert!(
            p.actions.iter().all(|a| a.pod_uid == GONE),
            "{:?}",
            p.actions
        );
        assert!(
            p.findings.iter().all(|f| f.pod_uid == GONE),
            "{:?}",
            p.findings
        );
    }
    assert!(
        act.calls().iter().all(|c| c.contains(&format!(" {GONE} "))),
        "{:?}",
        act.calls()
    );
    assert!(!act.calls().is_empty(), "the real orphan was handled");
}

#[tokio::test]
async fn preview_changes_no_history() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    for _ in 0..3 {
        let (p, _) = r.pass(Mode::Preview).await;
        assert!(p.actions.is_empty(), "a preview sees one pass only");
    }
    let (p, _) = r.pass(Mode::Act).await;
    assert!(p.actions.is_empty(), "previews did not count as passes");
    assert_eq!(p.pass, 1);
    // Now the preview predicts exactly what the next pass does.
    let (preview, _) = r.pass(Mode::Preview).await;
    let (real, _) = r.pass(Mode::Act).await;
    assert_eq!(planned(&preview), planned(&real));
    assert_eq!(act.calls(), planned(&real));
}
