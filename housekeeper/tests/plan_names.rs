//! Only names in kubelet's exact shapes are ever acted on, whatever a root flag points at: acting
//! passes (real removal on a temp tree) over roots full of things that are not kubelet's remove
//! exactly kubelet's orphans and report the rest as FOREIGN. The same holds for pod cgroup names
//! and for sandboxes and containers that kubelet did not make.

#[path = "support/fake.rs"]
mod fake;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, container, reconciler, sandbox};
use podward_api::housekeeper::v1::{Finding, FindingKind, Plan};
use podward_api::shim::v1::{Delivery, Sandbox, Snapshot};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::runtime::{ContainerPhase, RuntimeView};

/// The finding's kind by name (`FOREIGN`, `WAITING`, ...).
fn kind(f: &Finding) -> &'static str {
    FindingKind::try_from(f.kind).map_or("?", |k| k.as_str_name())
}

fn foreign(plan: &Plan, category: &str) -> Vec<String> {
    plan.findings
        .iter()
        .filter(|f| kind(f) == "FOREIGN" && f.category == category)
        .map(|f| f.target.clone())
        .collect()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// Acting passes with a zero grace, real removal: enough for any orphan to be acted on.
async fn act_until_settled(node: &Arc<FakeNode>, act: &Arc<RecordingActuator>) -> Plan {
    let (r, clock) = reconciler(node, act, node.settings(Duration::ZERO));
    let mut last = Plan::default();
    for _ in 0..4 {
        clock.advance(Duration::from_secs(60));
        last = r.pass(Mode::Act).await.0;
        assert!(last.sources_ok, "{:?}", last.sources);
    }
    last
}

fn really() -> Arc<RecordingActuator> {
    Arc::new(RecordingActuator {
        really: true,
        ..Default::default()
    })
}

#[tokio::test]
async fn an_acting_pass_over_a_wrong_log_root_removes_only_kubelets_log_dirs() {
    let node = FakeNode::new();
    let logs = node.root().join("logs");
    // What `--log-root` pointed at the wrong place finds: a user's own files.
    let user_data = [
        "etc/passwd",
        "home/alice/thesis.txt",
        "important-data/db.sqlite",
        "var/log/syslog",
        // Near misses of kubelet's shape.
        "ns_web_not-a-uid/app/0.log",
        "Default_web-0_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b/app/0.log",
        "ns_web_0_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b/app/0.log",
        "ns_web-0_6B1AA4D4-6D1F-4F65-AE2B-0E0AD1DC5B1B/app/0.log",
        "ns_web-0_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1/app/0.log",
        "..._web-0_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b/app/0.log",
    ];
    for f in user_data {
        write(&logs.join(f), "user data");
    }
    // And one real orphan's log dir (and its cgroup and pod dir).
    node.leave_pod(U1);
    let orphan_log = logs.join(format!("ns_web-{U1}_{U1}"));
    assert!(orphan_log.exists());

    let act = really();
    let plan = act_until_settled(&node, &act).await;

    for f in user_data {
        assert_eq!(
            fs::read_to_string(logs.join(f)).ok().as_deref(),
            Some("user data"),
            "{f} was touched"
        );
    }
    assert!(
        !orphan_log.exists(),
        "kubelet's orphaned log dir is removed"
    );
    let calls = act.calls();
    assert!(
        calls.iter().all(|c| c.contains(U1)),
        "acted on something not kubelet's: {calls:?}"
    );
    let listed = foreign(&plan, "log_dir");
    assert_eq!(listed.len(), 10, "{listed:?}");
    assert!(
        listed.iter().any(|t| t.ends_with("/logs/etc")),
        "{listed:?}"
    );
}

#[tokio::test]
async fn an_acting_pass_over_a_wrong_kubelet_root_removes_only_pod_uid_dirs() {
    let node = FakeNode::new();
    let pods = node.kubelet_root().join("pods");
    let user_data = [
        "config/kubelet.conf",
        "not-a-uid/volumes/data",
        "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1/containers/x",
        "6B1AA4D4-6D1F-4F65-AE2B-0E0AD1DC5B1B/containers/x",
        "6b1aa4d4_6d1f_4f65_ae2b_0e0ad1dc5b1b/containers/x",
        "0123456789abcdef0123456789abcdeg/containers/x",
        "pod6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b/containers/x",
    ];
    for f in user_data {
        write(&pods.join(f), "user data");
    }
    // A symlink named like a pod: never followed, never removed.
    let outside = node.root().join("outside");
    write(&outside.join("keep"), "user data");
    let hash = "0123456789abcdef0123456789abcdef";
    std::os::unix::fs::symlink(&outside, pods.join(hash)).expect("symlink");
    node.leave_pod(U1);

    let act = really();
    let plan = act_until_settled(&node, &act).await;

    for f in user_data {
        assert_eq!(
            fs::read_to_string(pods.join(f)).ok().as_deref(),
            Some("user data"),
            "{f} was touched"
        );
    }
    assert!(pods.join(hash).is_symlink());
    assert_eq!(
        fs::read_to_string(outside.join("keep")).expect("kept"),
        "user data"
    );
    assert!(
        !node.pod_dir(U1).exists(),
        "kubelet's orphaned pod dir goes"
    );
    let listed = foreign(&plan, "pod_dir");
    assert_eq!(listed.len(), 8, "{listed:?}");
    let symlink = plan
        .findings
        .iter()
        .find(|f| f.target.ends_with(hash))
        .expect("the symlink is reported");
    assert!(symlink.reason.contains("symlink"), "{symlink:?}");
}

#[tokio::test]
async fn a_pod_cgroup_whose_uid_is_not_kubelets_is_never_removed_and_is_reported_foreign() {
    let node = FakeNode::new();
    let qos = node.root().join("cgroup/kubepods/burstable");
    let not_pods = [
        "podnot-a-uid",
        "pod6B1AA4D4-6D1F-4F65-AE2B-0E0AD1DC5B1B",
        "pod6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1",
        "pod..",
        "pod",
        "foopod6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b",
    ];
    for n in not_pods {
        fs::create_dir_all(qos.join(n)).expect("mkdir");
    }
    node.leave_pod(U1);
    let act = really();
    let plan = act_until_settled(&node, &act).await;
    for n in not_pods {
        assert!(qos.join(n).exists(), "{n} was removed");
    }
    // Reported, one line each, and kubelet's own QoS cgroups (`kubepods/besteffort` beside the
    // guaranteed pods) are not.
    let mut listed = foreign(&plan, "cgroup");
    listed.sort();
    let mut expected: Vec<String> = not_pods
        .iter()
        .map(|n| qos.join(n).display().to_string())
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(
        !qos.join(format!("pod{U1}")).exists(),
        "the real orphan goes"
    );
    assert!(
        plan.actions.iter().all(|a| a.pod_uid == U1),
        "{:?}",
        plan.actions
    );
}

#[tokio::test]
async fn a_leaked_sandbox_that_kubelet_did_not_make_is_reported_not_removed() {
    let node = FakeNode::new();
    // Undelivered and never used: a leak, if kubelet made it. These were made by another client.
    let mut other = sandbox("crictl-made", "my-sandbox", 0, true);
    other.namespace = "default".into();
    let mut bad_ns = sandbox("bad-ns", U1, 0, true);
    bad_ns.namespace = "Not_A_Namespace".into();
    let mut bad_name = sandbox("bad-name", U1, 0, true);
    bad_name.name = "web/../x".into();
    let kubelets = sandbox("kubelets", U1, 0, true);
    node.set_runtime(RuntimeView {
        sandboxes: vec![other, bad_ns, bad_name, kubelets],
        containers: vec![],
        ..Default::default()
    });
    let undelivered = |id: &str, uid: &str| Sandbox {
        id: id.into(),
        uid: uid.into(),
        run_delivery: Delivery::Undelivered as i32,
        ..Default::default()
    };
    *node.shim.lock() = Some(Snapshot {
        sandboxes: vec![
            undelivered("crictl-made", "my-sandbox"),
            undelivered("bad-ns", U1),
            undelivered("bad-name", U1),
            undelivered("kubelets", U1),
        ],
        ..Default::default()
    });
    let act = Arc::new(RecordingActuator::default());
    let plan = act_until_settled(&node, &act).await;
    // (The fake runtime keeps listing it, so every pass removes it again.)
    let mut removed: Vec<_> = act
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("REMOVE_SANDBOX"))
        .collect();
    removed.dedup();
    assert_eq!(
        removed,
        ["REMOVE_SANDBOX kubelets"],
        "only kubelet's leaked sandbox is removed"
    );
    let mut listed = foreign(&plan, "sandbox");
    listed.sort();
    assert_eq!(listed, ["bad-name", "bad-ns", "crictl-made"]);
}

#[tokio::test]
async fn an_exited_container_of_a_non_kubelet_pod_is_never_removed() {
    let node = FakeNode::new();
    node.set_runtime(RuntimeView {
        sandboxes: vec![
            sandbox("s", U1, 0, true),
            sandbox("t", "not-a-uid", 0, true),
        ],
        containers: vec![
            container("k0", "s", U1, "app", 0, ContainerPhase::Exited),
            container("k1", "s", U1, "app", 1, ContainerPhase::Exited),
            container("x0", "t", "not-a-uid", "app", 0, ContainerPhase::Exited),
            container("x1", "t", "not-a-uid", "app", 1, ContainerPhase::Exited),
            container("n0", "s", U1, "Bad_Name", 0, ContainerPhase::Exited),
            container("n1", "s", U1, "Bad_Name", 1, ContainerPhase::Exited),
        ],
        ..Default::default()
    });
    let act = Arc::new(RecordingActuator::default());
    let mut settings = node.settings(Duration::ZERO);
    settings.remove_exited_containers = true;
    let (r, _clock) = reconciler(&node, &act, settings);
    let (plan, _) = r.pass(Mode::Act).await;
    assert_eq!(act.calls(), ["REMOVE_CONTAINER k0"]);
    let mut listed = foreign(&plan, "container");
    listed.sort();
    assert_eq!(listed, ["n0", "x0"]);
}

#[tokio::test]
async fn foreign_entries_are_counted_in_a_metric_so_a_wrong_root_can_alert() {
    let node = FakeNode::new();
    let logs = node.root().join("logs");
    for f in ["etc/passwd", "home/alice/thesis.txt", "usr/bin/sh"] {
        write(&logs.join(f), "user data");
    }
    fs::create_dir_all(
        node.root()
            .join("cgroup/kubepods/burstable/another-agents-cgroup"),
    )
    .expect("mkdir");
    let registry = prometheus::Registry::new();
    let metrics = podward_housekeeper::metrics::Metrics::register(&registry).expect("metrics");
    let (r, _clock) = reconciler(&node, &really(), node.settings(Duration::ZERO));
    let plan = r.with_metrics(metrics).pass(Mode::Act).await.0;
    assert!(plan.sources_ok, "{:?}", plan.sources);
    let gauge = |category: &str| {
        registry
            .gather()
            .iter()
            .filter(|f| f.name() == "podward_housekeeper_foreign")
            .flat_map(|f| f.get_metric().to_vec())
            .find(|m| m.get_label().iter().any(|l| l.value() == category))
            .map(|m| m.get_gauge().get_value())
    };
    assert_eq!(gauge("log_dir"), Some(3.0), "etc, home and usr");
    assert_eq!(gauge("pod_dir"), Some(0.0));
    assert_eq!(
        gauge("cgroup"),
        Some(1.0),
        "another agent's cgroup under kubepods"
    );
    assert!(logs.join("etc/passwd").exists());
}
