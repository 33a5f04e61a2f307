//! A pass reads its sources in kubelet's order, and a pass where any required source failed
//! plans nothing and acts on nothing (kubelet's `sourcesReady`); the shim is optional.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, reconciler};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::Source;

#[tokio::test]
async fn sources_are_read_in_kubelets_order_cgroups_first() {
    let node = FakeNode::new();
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let (plan, _) = r.pass(Mode::Act).await;
    let order = [
        Source::Cgroups,
        Source::Runtime,
        Source::Shim,
        Source::PodDirs,
        Source::LogDirs,
        Source::Mounts,
    ];
    assert_eq!(node.reads.lock().as_slice(), order);
    let reported: Vec<_> = plan.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(reported, order.map(Source::as_str));
    assert!(
        plan.sources
            .iter()
            .find(|s| s.name == Source::Shim.as_str())
            .expect("shim report")
            .optional
    );
}

#[tokio::test]
async fn a_pass_where_any_required_source_failed_acts_on_nothing() {
    for failing in [
        Source::Cgroups,
        Source::Runtime,
        Source::PodDirs,
        Source::LogDirs,
        Source::Mounts,
    ] {
        let node = FakeNode::new();
        node.leave_pod(U1);
        let act = Arc::new(RecordingActuator::default());
        let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
        // Two dry-run passes make U1 an orphan (zero grace, two passes).
        r.pass(Mode::DryRun).await;
        let (ready, _) = r.pass(Mode::DryRun).await;
        assert_eq!(
            ready.actions.len(),
            3,
            "cgroup, pod dir, log dir planned: {ready:?}"
        );

        node.fail(failing, true);
        let (plan, _) = r.pass(Mode::Act).await;
        assert!(!plan.sources_ok, "{failing}");
        assert!(plan.actions.is_empty(), "{failing}: {:?}", plan.actions);
        assert!(plan.findings.is_empty(), "{failing}: {:?}", plan.findings);
        assert!(
            act.calls().is_empty(),
            "{failing}: acted: {:?}",
            act.calls()
        );
        let report = plan
            .sources
            .iter()
            .find(|s| s.name == failing.as_str())
            .expect("report");
        assert!(
            !report.ok && report.error.contains("unavailable"),
            "{report:?}"
        );

        // The failed pass broke the chain of evidence: the next good pass waits again.
        node.fail(failing, false);
        let (after, _) = r.pass(Mode::Act).await;
        assert!(after.sources_ok);
        assert!(
            after.actions.is_empty(),
            "{failing}: history must restart: {:?}",
            after.actions
        );
        assert!(act.calls().is_empty());
    }
}

#[tokio::test]
async fn without_the_shim_orphans_are_still_handled() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    node.fail(Source::Shim, true);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    let (plan, _) = r.pass(Mode::Act).await;
    assert!(plan.sources_ok);
    let shim = plan
        .sources
        .iter()
        .find(|s| s.name == Source::Shim.as_str())
        .expect("shim report");
    assert!(!shim.ok && shim.optional);
    assert_eq!(act.calls().len(), 3, "{:?}", act.calls());
}
