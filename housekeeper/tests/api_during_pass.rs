//! `Status` and `Plan` never wait for a pass: while one is held in the middle of acting (a cgroup
//! destroy that does not return), both answer at once.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, reconciler};
use podward_api::housekeeper::v1::FindingKind;
use podward_api::test_util::eventually;
use podward_housekeeper::reconcile::Mode;

/// Longer than any answer that does not wait, far shorter than the held action.
const ANSWER: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_plan_answer_while_a_pass_acts() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    *act.hold.lock() = true;
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let r = Arc::new(r);
    r.pass(Mode::DryRun).await;
    clock.advance(Duration::from_secs(60));
    let running = tokio::spawn({
        let r = r.clone();
        async move { r.pass(Mode::Act).await }
    });
    eventually(
        "the acting pass to be inside its cgroup destroy",
        Duration::from_secs(10),
        async || act.in_destroy.load(Ordering::SeqCst) == 1,
    )
    .await;

    let status = tokio::time::timeout(ANSWER, r.status()).await;
    let preview = tokio::time::timeout(ANSWER, r.pass(Mode::Preview)).await;
    *act.hold.lock() = false;
    let (acted, _) = running.await.expect("pass");

    let status = status.expect("Status waited for the running pass");
    assert!(
        status.last_pass.is_some_and(|p| p.pass == 1),
        "the last finished pass is the first"
    );
    let (plan, _) = preview.expect("Plan waited for the running pass");
    assert!(
        plan.findings
            .iter()
            .any(|f| f.pod_uid == U1 && f.kind() == FindingKind::Backoff),
        "the preview sees the action in flight: {:#?}",
        plan.findings
    );
    assert_eq!(acted.pass, 2);
    assert!(!acted.actions.is_empty());
}
