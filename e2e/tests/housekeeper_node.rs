//! The housekeeper on a real containerd, real cgroups (v1 controllers and the v2 mount) and a
//! real process: with containerd stopped a pass plans nothing and acts on nothing; once it is
//! back, an orphaned pod cgroup with a running process is emptied and removed, with its pod and
//! log dirs; the cgroup of a pod whose sandbox exists (NotReady included) is never touched; a
//! dry run acts on nothing and its plan is what the real pass then does (through the API); and on
//! real containerd 1.6 (no CRI RuntimeConfig) the cgroup driver comes from the layout, a running
//! pod whose cgroups are nowhere under the pod cgroup root fails the cgroups source instead of
//! "ok, 0 items", and a flag that contradicts the layout is refused naming both.

#[path = "support/housekeeper.rs"]
mod support;

use std::time::Duration;

use podward_api::cri::{ListPodSandboxRequest, PodSandboxState, StopPodSandboxRequest};
use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::housekeeper::v1::{Outcome, ReconcileRequest};
use podward_api::test_util::eventually;
use podward_e2e::{ContainerSpec, Driver, PodSpec, RestartPolicy, TestNode};
use podward_housekeeper::config::DriverName;
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::run::node_reconciler;
use support::{PodCgroup, config, leave_dirs};

const ORPHAN: &str = "0bad0000-aaaa-4bbb-8ccc-000000000001";

#[tokio::test]
async fn containerd_down_means_no_action_then_the_orphan_goes() {
    podward_e2e::init_test_logging();
    let mut node = TestNode::start().await.expect("start node");
    let cfg = config(&node);
    let mut cg = PodCgroup::create(&node, ORPHAN);
    let pid = cg.spawn_sleeper();
    let (pod_dir, log_dir) = leave_dirs(&cfg, ORPHAN);
    let rec = node_reconciler(&cfg);

    let (p1, _) = rec.pass(Mode::Act).await;
    assert!(p1.sources_ok, "{:?}", p1.sources);
    assert!(
        p1.actions.is_empty(),
        "first sighting only waits: {:?}",
        p1.actions
    );

    node.stop_containerd().await;
    let (p2, _) = rec.pass(Mode::Act).await;
    assert!(!p2.sources_ok);
    let runtime = p2
        .sources
        .iter()
        .find(|s| s.name == "runtime")
        .expect("runtime report");
    assert!(!runtime.ok, "{runtime:?}");
    assert!(p2.actions.is_empty() && p2.findings.is_empty(), "{p2:?}");
    assert!(cg.alive(pid), "a pass without the runtime killed a process");
    assert!(
        cg.paths().iter().all(|p| p.exists()),
        "a pass without the runtime removed a cgroup"
    );
    assert!(pod_dir.exists() && log_dir.exists());

    node.start_containerd().await.expect("restart containerd");
    // The failed pass broke the evidence chain: one more pass waits, the next acts.
    let p = support::act_until_orphan_removed(&rec, ORPHAN, |_| {}).await;
    assert!(
        p.pass >= 4,
        "at least one waiting pass after containerd came back: pass {}",
        p.pass
    );
    eventually("the sleeper to die", Duration::from_secs(10), async || {
        !cg.alive(pid)
    })
    .await;
    assert!(!cg.exists_anywhere(), "cgroup left: {:?}", cg.paths());
    assert!(!pod_dir.exists() && !log_dir.exists());
}

#[tokio::test]
async fn a_pod_with_a_notready_sandbox_is_untouched_and_dry_run_equals_the_real_pass() {
    podward_e2e::init_test_logging();
    let node = TestNode::start().await.expect("start node");
    let cfg = config(&node);

    // A live pod, kubelet-style cgroup, then its sandbox stopped: NotReady, still in the runtime.
    let live_uid = "11111111-aaaa-4bbb-8ccc-000000000002";
    let mut live_cg = PodCgroup::create(&node, live_uid);
    let live_pid = live_cg.spawn_sleeper();
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let spec = PodSpec::new("live")
        .uid(live_uid)
        .grace_period(1)
        .restart_policy(RestartPolicy::Never)
        .cgroup_parent(&format!("/{}", live_cg.rel))
        .container(ContainerSpec::new("app", &["sleep", "3600"]));
    let pod = driver.run_pod(&node, spec).await.expect("run pod");
    let (live_dir, _) = leave_dirs(&cfg, live_uid);
    let mut rt = node.runtime_client().await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.sandbox_id().to_owned(),
    })
    .await
    .expect("stop sandbox");

    // An orphan with a running process.
    let mut orphan_cg = PodCgroup::create(&node, ORPHAN);
    let orphan_pid = orphan_cg.spawn_sleeper();
    let (orphan_dir, orphan_log) = leave_dirs(&cfg, ORPHAN);

    // The daemon, in-process, on a socket in the node's dir.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon_cfg = cfg.clone();
    let daemon = tokio::spawn(async move {
        podward_housekeeper::run(daemon_cfg, async move {
            let _ = stop_rx.await;
        })
        .await
    });
    let mut client = None;
    eventually(
        "the housekeeper socket",
        Duration::from_secs(20),
        async || match podward_api::socket::connect(cfg.socket.clone()).await {
            Ok(ch) => {
                client = Some(HousekeeperClient::new(ch));
                true
            }
            Err(_) => false,
        },
    )
    .await;
    let mut client = client.expect("client");

    let mut dry = None;
    eventually(
        "a dry run that plans the orphan",
        Duration::from_secs(30),
        async || {
            let r = client
                .reconcile(ReconcileRequest { dry_run: true })
                .await
                .expect("Reconcile");
            let plan = r.into_inner().plan.expect("plan");
            let ready = plan.actions.iter().any(|a| a.pod_uid == ORPHAN);
            if ready {
                dry = Some(plan);
            }
            ready
        },
    )
    .await;
    let dry = dry.expect("dry plan");
    assert!(dry.dry_run);
    assert!(
        dry.actions.iter().all(|a| a.outcome() == Outcome::Planned),
        "{:?}",
        dry.actions
    );
    assert!(
        dry.actions.iter().all(|a| a.pod_uid == ORPHAN),
        "only the orphan: {:?}",
        dry.actions
    );
    assert!(
        dry.findings.iter().all(|f| f.pod_uid != live_uid),
        "{:?}",
        dry.findings
    );
    // Acted on nothing.
    assert!(orphan_cg.alive(orphan_pid) && orphan_cg.paths().iter().all(|p| p.exists()));
    assert!(orphan_dir.exists() && orphan_log.exists());

    // The operator's view matches (table through the CLI path).
    let table = podward_housekeeper::report::plan_command(&cfg, false, false)
        .await
        .expect("plan command");
    assert!(
        table.contains("REMOVE_CGROUP") && table.contains(ORPHAN),
        "{table}"
    );

    let real = client
        .reconcile(ReconcileRequest { dry_run: false })
        .await
        .expect("Reconcile")
        .into_inner();
    let real = real.plan.expect("plan");
    let key = |p: &podward_api::housekeeper::v1::Plan| -> Vec<(i32, String, String)> {
        p.actions
            .iter()
            .map(|a| (a.kind, a.pod_uid.clone(), a.target.clone()))
            .collect()
    };
    assert_eq!(
        key(&dry),
        key(&real),
        "the real pass did what the dry run planned"
    );
    assert!(
        real.actions.iter().all(|a| a.outcome() == Outcome::Done),
        "{:?}",
        real.actions
    );
    eventually(
        "the orphan's sleeper to die",
        Duration::from_secs(10),
        async || !orphan_cg.alive(orphan_pid),
    )
    .await;
    assert!(!orphan_cg.exists_anywhere() && !orphan_dir.exists() && !orphan_log.exists());

    // The NotReady pod: cgroup, process, pod dir and sandbox untouched.
    assert!(live_cg.alive(live_pid), "the live pod's process was killed");
    assert!(
        live_cg.paths().iter().all(|p| p.exists()),
        "the live pod's cgroup was touched"
    );
    assert!(live_dir.exists());
    let sandboxes = rt
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("list")
        .into_inner();
    let sb = sandboxes
        .items
        .iter()
        .find(|s| s.id == pod.sandbox_id())
        .expect("sandbox still there");
    assert_eq!(sb.state, PodSandboxState::SandboxNotready as i32);

    let status = client
        .status(podward_api::housekeeper::v1::StatusRequest {})
        .await
        .expect("Status")
        .into_inner();
    assert!(status.actions_done >= 3, "{status:?}");
    let _ = stop_tx.send(());
    daemon.await.expect("daemon task").expect("daemon result");
    assert!(!cfg.socket.exists(), "socket removed on shutdown");
    pod.delete().await.expect("delete pod");
}

#[tokio::test]
async fn the_driver_comes_from_the_node_and_a_hidden_pod_root_is_never_0_items() {
    podward_e2e::init_test_logging();
    let node = TestNode::start().await.expect("start node");
    let cfg = config(&node);
    assert_eq!(cfg.cgroup_driver, DriverName::Auto);
    // A running pod whose cgroup sits directly under the node's parent, where kubelet would have
    // made `kubepods`: nothing the housekeeper scans, the way a wrong --cgroup-root hides pods.
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let spec = PodSpec::new("hidden")
        .uid("22222222-aaaa-4bbb-8ccc-000000000003")
        .grace_period(1)
        .restart_policy(RestartPolicy::Never)
        .container(ContainerSpec::new("app", &["sleep", "3600"]));
    let _pod = driver.run_pod(&node, spec).await.expect("run pod");
    let (orphan_dir, _) = leave_dirs(&cfg, ORPHAN);
    let rec = node_reconciler(&cfg);
    for _ in 0..3 {
        let (p, _) = rec.pass(Mode::Act).await;
        assert!(!p.sources_ok, "{:?}", p.sources);
        let cg = p
            .sources
            .iter()
            .find(|s| s.name == "cgroups")
            .expect("cgroups report");
        assert!(!cg.ok, "{cg:?}");
        assert!(
            cg.error.contains("no pod cgroup root found")
                && cg
                    .error
                    .contains("while the runtime reports 1 running pod sandbox(es)"),
            "{cg:?}"
        );
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        let d = p.cgroup_driver.expect("the decision is still reported");
        assert!(
            d.evidence
                .iter()
                .any(|e| e.contains("does not implement CRI RuntimeConfig")),
            "containerd 1.6: {d:?}"
        );
    }
    assert!(
        orphan_dir.exists(),
        "a pass acted although it could not see the cgroups"
    );

    // Once the pod cgroup root exists, the layout names the driver and passes go on.
    let mut orphan_cg = PodCgroup::create(&node, ORPHAN);
    let pid = orphan_cg.spawn_sleeper();
    let (p, _) = rec.pass(Mode::DryRun).await;
    assert!(p.sources_ok, "{:?}", p.sources);
    eprintln!(
        "cgroups source on real containerd (RuntimeConfig call, layout probe, scan): {:?}",
        p.sources
            .iter()
            .find(|s| s.name == "cgroups")
            .map(|s| Duration::from_nanos(s.duration_ns as u64))
    );
    let d = p.cgroup_driver.clone().expect("driver");
    assert_eq!(
        (
            d.driver.as_str(),
            d.found_by.as_str(),
            d.cgroup_version.as_str()
        ),
        ("cgroupfs", "layout", "hybrid")
    );
    let table = podward_housekeeper::report::plan_command(&cfg, false, true)
        .await
        .expect("plan --local");
    assert!(
        table.contains("cgroup driver: cgroupfs (from the layout on disk), cgroup hybrid"),
        "{table}"
    );

    // The mistake the other way round: the flag says systemd on a cgroupfs node.
    let mut wrong = cfg.clone();
    wrong.cgroup_driver = DriverName::Systemd;
    let (p, _) = node_reconciler(&wrong).pass(Mode::Act).await;
    let cg = p
        .sources
        .iter()
        .find(|s| s.name == "cgroups")
        .expect("cgroups report");
    assert!(
        cg.error.contains(
            "--cgroup-driver=systemd contradicts the node: the layout on disk says cgroupfs"
        ),
        "{cg:?}"
    );
    assert!(p.actions.is_empty() && orphan_cg.alive(pid));
}
