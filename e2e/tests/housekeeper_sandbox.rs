//! Leaked sandboxes on the real containerd, produced through the real shim: kubelet (the Driver)
//! gives up on a RunPodSandbox whose response the shim holds back (its `fault-injection` hold),
//! containerd completes it anyway, the shim marks it undelivered, and the housekeeper stops and
//! removes it (no container was ever created in it) — while a normal sandbox is left alone.

#[path = "support/housekeeper.rs"]
mod support;

use std::time::Duration;

use podward_api::test_util::eventually;
use support::config;

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{
    ListPodSandboxRequest, PodSandboxConfig, PodSandboxState, RunPodSandboxRequest,
};
use podward_api::housekeeper::v1::{ActionKind, Outcome};
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::shim::v1::{Delivery, SnapshotRequest};
use podward_e2e::{ContainerSpec, Driver, PodSpec, RestartPolicy, TestNode};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::run::node_reconciler;
use podward_shim::fault::Faults;

const RUN_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RunPodSandbox";

/// A host-network sandbox config with kubelet's labels, in the node's cgroup parent.
fn sandbox_config(node: &TestNode, name: &str, uid: &str) -> PodSandboxConfig {
    PodSpec::new(name)
        .uid(uid)
        .sandbox_config(node)
        .expect("sandbox config")
}

#[tokio::test]
async fn undelivered_unused_sandbox_is_removed_and_a_normal_one_is_not() {
    podward_e2e::init_test_logging();
    let node = TestNode::start().await.expect("start node");
    let cfg = config(&node);
    // The test's pods are not in kubelet-style cgroups; the pod cgroup root kubelet makes at start
    // must exist, or the cgroups source rightly refuses to call this node "0 items".
    support::kubelet_pod_root(&node);
    let cri_sock = node.dir().join("cri.sock");

    // The shim in-process, with a hold armed on the next RunPodSandbox response.
    let faults = Faults::new();
    let mut held = faults.hold_next_response(RUN_POD_SANDBOX);
    let shim_cfg = podward_shim::config::Config {
        listen: cri_sock.clone(),
        common: podward_api::daemon::config::Common {
            containerd_socket: node.containerd_socket(),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        control_socket: cfg.shim_socket.clone(),
        ..Default::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let options = podward_shim::Options {
        faults,
        ..Default::default()
    };
    let shim = tokio::spawn(async move {
        podward_shim::run_with(shim_cfg, options, async move {
            let _ = stop_rx.await;
        })
        .await
    });
    eventually(
        "the shim's CRI socket",
        Duration::from_secs(20),
        async || cri_sock.exists(),
    )
    .await;
    let driver = Driver::connect(&cri_sock)
        .await
        .expect("driver through the shim");

    // kubelet's RunPodSandbox, with kubelet's kind of deadline (grpc-timeout): containerd creates
    // the sandbox, the shim holds the answer past the deadline, the caller gives up, then the
    // answer is let go to nobody.
    let leaked_uid = "1ea0ed00-aaaa-4bbb-8ccc-000000000001";
    let mut via_shim = RuntimeServiceClient::new(podward_api::socket::channel(cri_sock.clone()));
    let mut req = tonic::Request::new(RunPodSandboxRequest {
        config: Some(sandbox_config(&node, "leaky", leaked_uid)),
        runtime_handler: String::new(),
    });
    let deadline = Duration::from_secs(8);
    req.set_timeout(deadline);
    let call = tokio::spawn(async move {
        tokio::time::timeout(
            deadline + Duration::from_secs(1),
            via_shim.run_pod_sandbox(req),
        )
        .await
    });
    let mut call = call;
    tokio::select! {
        answer = &mut call => panic!("RunPodSandbox answered although held: {answer:?}"),
        r = tokio::time::timeout(Duration::from_secs(60), held.wait_held()) => r.expect("containerd answered RunPodSandbox"),
    }
    let answer = call.await.expect("caller task");
    assert!(
        !matches!(answer, Ok(Ok(_))),
        "the caller must not get the held answer: {answer:?}"
    );
    held.release();

    // A normal pod through the same shim.
    let normal = driver
        .run_pod(
            &node,
            PodSpec::new("normal")
                .grace_period(1)
                .restart_policy(RestartPolicy::Never)
                .container(ContainerSpec::new("app", &["sleep", "3600"])),
        )
        .await
        .expect("normal pod");

    // The shim marks the abandoned sandbox undelivered.
    let mut lifecycle = LifecycleClient::new(podward_api::socket::channel(cfg.shim_socket.clone()));
    let mut leaked_id = String::new();
    eventually(
        "the shim to mark the sandbox undelivered",
        Duration::from_secs(30),
        async || {
            let Ok(snap) = lifecycle.snapshot(SnapshotRequest {}).await else {
                return false;
            };
            let snap = snap.into_inner();
            match snap.sandboxes.into_iter().find(|s| s.uid == leaked_uid) {
                Some(s) if s.run_delivery == Delivery::Undelivered as i32 => {
                    leaked_id = s.id;
                    true
                }
                _ => false,
            }
        },
    )
    .await;
    let mut rt = node.runtime_client().await;
    let list = rt
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("list")
        .into_inner();
    assert!(
        list.items.iter().any(|s| s.id == leaked_id),
        "containerd did create the sandbox"
    );

    let rec = node_reconciler(&cfg);
    let (dry, _) = rec.pass(Mode::DryRun).await;
    let (p, _) = rec.pass(Mode::Act).await;
    let sandbox_actions: Vec<_> = p
        .actions
        .iter()
        .filter(|a| a.kind() == ActionKind::RemoveSandbox)
        .collect();
    assert_eq!(sandbox_actions.len(), 1, "{:?}", p.actions);
    assert_eq!(sandbox_actions[0].target, leaked_id);
    assert_eq!(sandbox_actions[0].pod_uid, leaked_uid);
    assert_eq!(
        sandbox_actions[0].outcome(),
        Outcome::Done,
        "{:?}",
        sandbox_actions[0]
    );
    assert!(
        sandbox_actions[0]
            .evidence
            .iter()
            .any(|e| e.contains("never reached kubelet"))
    );
    assert_eq!(
        dry.actions
            .iter()
            .map(|a| (a.kind, a.target.clone()))
            .collect::<Vec<_>>(),
        p.actions
            .iter()
            .map(|a| (a.kind, a.target.clone()))
            .collect::<Vec<_>>(),
        "dry run planned what the real pass did"
    );

    let list = rt
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("list")
        .into_inner();
    assert!(
        !list.items.iter().any(|s| s.id == leaked_id),
        "leaked sandbox still there"
    );
    let kept = list
        .items
        .iter()
        .find(|s| s.id == normal.sandbox_id())
        .expect("normal sandbox kept");
    assert_eq!(kept.state, PodSandboxState::SandboxReady as i32);
    assert!(
        p.actions.iter().all(|a| a.pod_uid != normal.uid()),
        "{:?}",
        p.actions
    );

    normal.delete().await.expect("delete normal pod");
    let _ = stop_tx.send(());
    shim.await.expect("shim task").expect("shim result");
}
