//! Acting: one action per UID at a time, per-UID backoff after a failure, D-state processes
//! reported and not retried tightly, re-verification right before acting, and a dry run that
//! acts on nothing and whose plan is what the real pass then does.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, U2, planned, reconciler, sandbox};
use podward_api::housekeeper::v1::{ActionKind, FindingKind, Outcome};
use podward_api::test_util::eventually;
use podward_housekeeper::act;
use podward_housekeeper::clock::{Clock, ManualClock};
use podward_housekeeper::decision::orphan::OrphanTracker;
use podward_housekeeper::decision::plan;
use podward_housekeeper::decision::uid_gate::{BACKOFF_MAX, UidGate};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::read_all;
use podward_housekeeper::sources::runtime::RuntimeView;

const BAD: &str = "00000000-0000-4000-8000-0000000000ba";
const GOOD: &str = "00000000-0000-4000-8000-000000000009";
const STUCK: &str = "00000000-0000-4000-8000-00000000000d";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_action_per_uid_at_a_time() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    *act.hold.lock() = true;
    let gate = UidGate::new();
    let clock = ManualClock::new();
    let settings = node.settings(Duration::ZERO);
    let mut tracker = OrphanTracker::new(Duration::ZERO);
    let mut plans = Vec::new();
    for _ in 0..2 {
        let snap = read_all(node.as_ref()).await;
        tracker.observe(clock.now(), &plan::present(&snap), plan::candidates(&snap));
        plans.push(snap);
    }
    // Two executions of the same plan (as two racing passes would): build both, run both.
    let snap2 = read_all(node.as_ref()).await;
    let snap1 = plans.pop().expect("snap");
    let assessor = podward_housekeeper::decision::assess::Assessor::new();
    let assess = async |snap: &podward_housekeeper::sources::Snapshot| {
        let dirs = plan::pod_dirs_to_assess(snap, &tracker, &gate, clock.now());
        let mounts = Arc::new(snap.mounts.clone().unwrap_or_default());
        assessor.assess_all(dirs, mounts, settings.walk).await
    };
    let (assessed1, assessed2) = (assess(&snap1).await, assess(&snap2).await);
    let mut first = plan::build(snap1, assessed1, &tracker, &gate, clock.now(), &settings);
    let mut second = plan::build(snap2, assessed2, &tracker, &gate, clock.now(), &settings);
    assert_eq!(first.plan.actions.len(), 3);
    let (n, a, g, c, k) = (
        node.clone(),
        act.clone(),
        gate.clone(),
        clock.clone(),
        node.kubelet_root(),
    );
    let running = tokio::spawn(async move {
        act::execute(&mut first, n, a, &g, &c, k).await;
        first
    });
    eventually(
        "the first destroy to start",
        Duration::from_secs(10),
        async || act.in_destroy.load(Ordering::SeqCst) == 1,
    )
    .await;
    act::execute(
        &mut second,
        node.clone(),
        act.clone(),
        &gate,
        &clock,
        node.kubelet_root(),
    )
    .await;
    for a in &second.plan.actions {
        assert_eq!(a.outcome(), Outcome::Planned, "{a:?}");
        assert!(a.error.contains("in flight"), "{a:?}");
    }
    *act.hold.lock() = false;
    let first = running.await.expect("first execution");
    assert!(
        first
            .plan
            .actions
            .iter()
            .all(|a| a.outcome() == Outcome::Done),
        "{:?}",
        first.plan.actions
    );
    assert_eq!(act.max_in_destroy.load(Ordering::SeqCst), 1);
    assert_eq!(
        act.calls().len(),
        3,
        "only the first execution acted: {:?}",
        act.calls()
    );
}

#[tokio::test]
async fn a_failure_backs_off_that_uid_only() {
    let node = FakeNode::new();
    node.leave_pod(BAD);
    node.leave_pod(GOOD);
    let act = Arc::new(RecordingActuator::default());
    act.failing.lock().insert(BAD.into());
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    let (p, _) = r.pass(Mode::Act).await;
    let bad: Vec<_> = p.actions.iter().filter(|a| a.pod_uid == BAD).collect();
    assert!(
        bad.iter().any(|a| a.outcome() == Outcome::Failed),
        "{bad:?}"
    );
    let calls_after_failure = act.calls().len();

    clock.advance(Duration::from_secs(1));
    let (p, _) = r.pass(Mode::Act).await;
    assert!(
        p.actions.iter().all(|a| a.pod_uid != BAD),
        "backing off: {:?}",
        p.actions
    );
    let backoff: Vec<_> = p
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::Backoff)
        .collect();
    assert!(
        !backoff.is_empty() && backoff.iter().all(|f| f.pod_uid == BAD),
        "{:?}",
        p.findings
    );
    assert!(
        act.calls()[calls_after_failure..]
            .iter()
            .all(|c| !c.contains(&format!(" {BAD} ")))
    );

    // After the delay (10s ± 10%) it is tried again.
    clock.advance(Duration::from_secs(12));
    let (p, _) = r.pass(Mode::Act).await;
    assert!(
        p.actions.iter().any(|a| a.pod_uid == BAD),
        "{:?}",
        p.findings
    );
}

#[tokio::test]
async fn d_state_processes_are_reported_and_not_retried_tightly() {
    let node = FakeNode::new();
    node.leave_pod(STUCK);
    let act = Arc::new(RecordingActuator::default());
    act.busy.lock().insert(STUCK.into(), vec![4242]);
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    let (p, _) = r.pass(Mode::Act).await;
    let cg = p
        .actions
        .iter()
        .find(|a| a.kind() == ActionKind::RemoveCgroup)
        .expect("cgroup action");
    assert_eq!(cg.outcome(), Outcome::Failed);
    let reported = p
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::Reported)
        .expect("D-state report");
    assert!(
        reported.reason.contains("4242") && reported.reason.contains("D state"),
        "{reported:?}"
    );
    let destroys = || {
        act.calls()
            .iter()
            .filter(|c| c.starts_with("REMOVE_CGROUP"))
            .count()
    };
    assert_eq!(destroys(), 1);
    for _ in 0..5 {
        clock.advance(Duration::from_secs(1));
        r.pass(Mode::Act).await;
    }
    assert_eq!(destroys(), 1, "not retried within the backoff");
    clock.advance(BACKOFF_MAX);
    r.pass(Mode::Act).await;
    assert_eq!(destroys(), 2, "retried after the backoff");
}

#[tokio::test]
async fn a_uid_that_reappears_before_the_act_is_left_alone() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::Act).await;
    // This pass's planning read sees no sandbox; the re-read right before acting sees one.
    let back = RuntimeView {
        sandboxes: vec![sandbox("s1", U1, 0, true)],
        containers: vec![],
        ..Default::default()
    };
    node.script_runtime(vec![RuntimeView::default(), back]);
    let (p, _) = r.pass(Mode::Act).await;
    assert_eq!(p.actions.len(), 3);
    for a in &p.actions {
        assert_eq!(a.outcome(), Outcome::Planned, "{a:?}");
        assert!(a.error.contains("now has a sandbox"), "{a:?}");
    }
    assert!(act.calls().is_empty(), "{:?}", act.calls());
}

#[tokio::test]
async fn dry_run_acts_on_nothing_and_its_plan_is_what_the_real_pass_does() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    node.leave_pod(U2);
    node.mount(
        &node
            .pod_dir(U2)
            .join("volumes/kubernetes.io~empty-dir/data"),
    );
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::DryRun).await;
    let (dry, _) = r.pass(Mode::DryRun).await;
    assert!(dry.dry_run);
    assert!(act.calls().is_empty());
    assert!(dry.actions.iter().all(|a| a.outcome() == Outcome::Planned));
    // U2 has a mount: its cgroup only gets REDUCE_CPU and its pod dir is BLOCKED.
    let kinds: Vec<_> = dry
        .actions
        .iter()
        .map(|a| (a.pod_uid.as_str(), a.kind()))
        .collect();
    assert!(kinds.contains(&(U2, ActionKind::ReduceCpu)), "{kinds:?}");
    assert!(
        !kinds.contains(&(U2, ActionKind::RemovePodDir)),
        "{kinds:?}"
    );
    assert!(
        dry.findings
            .iter()
            .any(|f| f.pod_uid == U2 && f.kind() == FindingKind::Blocked)
    );

    let (real, _) = r.pass(Mode::Act).await;
    assert!(!real.dry_run);
    assert_eq!(planned(&dry), planned(&real));
    // Pods run in parallel, so compare per pod: each pod's calls are its planned actions, in order.
    for uid in [U1, U2] {
        let mine = |v: Vec<String>| {
            v.into_iter()
                .filter(|c| c.contains(&format!(" {uid} ")))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            mine(act.calls()),
            mine(planned(&real)),
            "executed exactly the plan of {uid}"
        );
    }
    assert_eq!(act.calls().len(), real.actions.len());
    assert!(
        real.actions.iter().all(|a| a.outcome() == Outcome::Done),
        "{:?}",
        real.actions
    );
}
