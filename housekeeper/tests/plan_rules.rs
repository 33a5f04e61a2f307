//! Planning rules beyond orphans: leaked sandboxes from the shim's index (undelivered AND
//! superseded or never used), exited containers beyond kubelet's GC policy (reported unless
//! enabled), and a pod dir that a safety rule blocks.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, container, nth_uid, planned, reconciler, sandbox};
use podward_api::housekeeper::v1::{FindingKind, Outcome};
use podward_api::shim::v1::{Delivery, Sandbox, Snapshot};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::runtime::{ContainerPhase, RuntimeView};

const P1: &str = "00000000-0000-4000-8000-0000000000f1";
const P2: &str = "00000000-0000-4000-8000-0000000000f2";

fn shim_sandbox(id: &str, uid: &str, attempt: u32, delivery: Delivery) -> Sandbox {
    Sandbox {
        id: id.into(),
        uid: uid.into(),
        attempt,
        run_delivery: delivery as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn undelivered_superseded_sandbox_is_removed_and_a_normal_one_is_not() {
    let node = FakeNode::new();
    node.set_runtime(RuntimeView {
        sandboxes: vec![
            sandbox("leaked", P1, 0, true),
            sandbox("current", P1, 1, true),
            sandbox("normal", P2, 0, true),
        ],
        containers: vec![
            container("c1", "current", P1, "app", 0, ContainerPhase::Running),
            container("c2", "normal", P2, "app", 0, ContainerPhase::Running),
        ],
        ..Default::default()
    });
    *node.shim.lock() = Some(Snapshot {
        sandboxes: vec![
            shim_sandbox("leaked", P1, 0, Delivery::Undelivered),
            shim_sandbox("current", P1, 1, Delivery::Delivered),
            shim_sandbox("normal", P2, 0, Delivery::Delivered),
        ],
        ..Default::default()
    });
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::from_secs(120)));
    let (p, _) = r.pass(Mode::Act).await;
    assert_eq!(planned(&p), ["REMOVE_SANDBOX leaked"]);
    assert!(
        p.actions[0]
            .evidence
            .iter()
            .any(|e| e.contains("never reached kubelet"))
    );
    assert!(
        p.actions[0]
            .evidence
            .iter()
            .any(|e| e.contains("superseded by sandbox current"))
    );
    assert_eq!(p.actions[0].outcome(), Outcome::Done);
    assert_eq!(act.calls(), ["REMOVE_SANDBOX leaked"]);
}

#[tokio::test]
async fn exited_containers_beyond_policy_are_reported_unless_enabled() {
    let node = FakeNode::new();
    node.set_runtime(RuntimeView {
        sandboxes: vec![sandbox("s", P1, 0, true)],
        containers: vec![
            container("old", "s", P1, "app", 0, ContainerPhase::Exited),
            container("prev", "s", P1, "app", 1, ContainerPhase::Exited),
            container("now", "s", P1, "app", 2, ContainerPhase::Running),
        ],
        ..Default::default()
    });
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let (p, _) = r.pass(Mode::Act).await;
    assert!(p.actions.is_empty());
    let f: Vec<_> = p
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::Reported)
        .collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].target, "old", "the newest exited one is kept");
    assert!(act.calls().is_empty());

    let mut settings = node.settings(Duration::ZERO);
    settings.remove_exited_containers = true;
    let (r, _clock) = reconciler(&node, &act, settings);
    let (p, _) = r.pass(Mode::Act).await;
    assert_eq!(planned(&p), ["REMOVE_CONTAINER old"]);
    assert_eq!(act.calls(), ["REMOVE_CONTAINER old"]);
}

#[tokio::test]
async fn a_regular_file_in_a_volume_blocks_the_pod_dir_and_is_reported() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let data = node
        .pod_dir(U1)
        .join("volumes/kubernetes.io~empty-dir/data/precious.db");
    std::fs::write(&data, b"user data").expect("write");
    let act = Arc::new(RecordingActuator {
        really: true,
        ..Default::default()
    });
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    let (p, _) = r.pass(Mode::Act).await;
    let blocked = p
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::Blocked)
        .expect("blocked finding");
    assert_eq!(blocked.pod_uid, U1);
    assert!(blocked.reason.contains("precious.db"), "{}", blocked.reason);
    assert!(
        !act.calls().iter().any(|c| c.starts_with("REMOVE_POD_DIR")),
        "{:?}",
        act.calls()
    );
    assert_eq!(std::fs::read(&data).expect("still there"), b"user data");
    // The cgroup and log dir (nothing mounted) were removed for real.
    assert!(
        !node
            .root()
            .join(format!("cgroup/kubepods/burstable/pod{U1}"))
            .exists()
    );
    assert!(!node.root().join(format!("logs/ns_web-{U1}_{U1}")).exists());
}

#[tokio::test]
async fn a_backlog_is_acted_on_in_bounded_batches_lowest_uids_first() {
    let node = FakeNode::new();
    let n = podward_housekeeper::decision::plan::MAX_UIDS_PER_PASS + 10;
    let uids: Vec<String> = (0..n).map(nth_uid).collect();
    for u in &uids {
        std::fs::create_dir_all(node.pod_dir(u)).expect("pod dir");
    }
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    let (p, _) = r.pass(Mode::Act).await;
    let acted: Vec<_> = p.actions.iter().map(|a| a.pod_uid.clone()).collect();
    assert_eq!(
        acted,
        uids[..podward_housekeeper::decision::plan::MAX_UIDS_PER_PASS].to_vec()
    );
    let deferred = p
        .findings
        .iter()
        .filter(|f| f.reason.contains("deferred"))
        .count();
    assert_eq!(deferred, 10, "the rest wait for the next pass");
    assert_eq!(
        act.calls().len(),
        podward_housekeeper::decision::plan::MAX_UIDS_PER_PASS
    );
}

/// Orphans that a safety rule keeps (a file under `volumes/`) must not hold the per-pass slots for
/// ever: every orphan is assessed within a bounded number of passes, however many are blocked, and
/// a blocked one is reassessed after a backoff rather than every pass.
#[tokio::test]
async fn blocked_orphans_never_starve_a_clean_one() {
    const BLOCKED: usize = 1000;
    let max = podward_housekeeper::decision::plan::MAX_UIDS_PER_PASS;
    let node = FakeNode::new();
    for i in 0..BLOCKED {
        let uid = nth_uid(i);
        let vol = node
            .pod_dir(&uid)
            .join("volumes/kubernetes.io~empty-dir/data");
        std::fs::create_dir_all(&vol).expect("volume dir");
        std::fs::write(vol.join("precious.db"), b"user data").expect("write");
    }
    // The clean orphan sorts after every blocked one.
    let clean = nth_uid(BLOCKED);
    std::fs::create_dir_all(node.pod_dir(&clean)).expect("pod dir");
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    // The first pass only observes (an orphan needs two passes); each later pass gets its turn.
    r.pass(Mode::Act).await;
    let bound = (BLOCKED + 1).div_ceil(max);
    let mut removed_in = None;
    let mut blocked_per_pass = Vec::new();
    let mut last_blocked = Vec::new();
    for pass in 1..=bound {
        clock.advance(Duration::from_secs(10));
        let (p, _) = r.pass(Mode::Act).await;
        last_blocked = p
            .findings
            .iter()
            .filter(|f| f.kind() == FindingKind::Blocked)
            .map(|f| f.pod_uid.clone())
            .collect();
        blocked_per_pass.push(last_blocked.len());
        if p.actions.iter().any(|a| a.pod_uid == clean) {
            removed_in = Some(pass);
            break;
        }
    }
    assert!(
        removed_in.is_some(),
        "the clean orphan was not acted on within {bound} passes (blocked per pass: {blocked_per_pass:?})"
    );
    assert!(
        blocked_per_pass.iter().all(|&b| b <= max),
        "{blocked_per_pass:?}"
    );
    // What the last pass found kept is not reassessed before its backoff is due.
    assert!(!last_blocked.is_empty());
    clock.advance(Duration::from_secs(1));
    let (p, _) = r.pass(Mode::Act).await;
    for uid in &last_blocked {
        let f = p
            .findings
            .iter()
            .find(|f| &f.pod_uid == uid)
            .expect("a kept orphan stays listed");
        assert_eq!(f.kind(), FindingKind::Backoff, "{uid}: {}", f.reason);
        assert!(f.reason.contains("kept by a safety rule"), "{}", f.reason);
    }
}
