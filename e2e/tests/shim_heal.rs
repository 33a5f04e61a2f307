//! The index heals itself when observation of a connection is lost, on the real containerd.
//!
//! A fault makes the side reader panic on a request of kubelet's one connection, as a reader
//! bug would: the connection is relayed on, unobserved. What is done on it next (a pod run, a
//! container created and started, then all of it removed) must reach the index and a Watch
//! subscriber within the bound docs/shim.md states (`--heal-period` + two relists), through
//! relists from containerd; metrics and `/readyz` say so while it lasts.

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{
    ContainerEventKind as CK, SandboxEventKind as SK, WatchEvent, WatchRequest, watch_event,
};
use podward_e2e::{PodSpec, TestNode};
use support::{InProcShim, lifecycle, metric, one_connection, wait_until};
use tokio::time::Instant;
use tonic::Streaming;

/// The relist period the test runs with (the default).
const HEAL_PERIOD: Duration = Duration::from_secs(1);

/// docs/shim.md's bound: the period plus two relists. A relist on this node (two Lists and a
/// Status or two) takes milliseconds; a second of allowance covers a loaded test machine.
const BOUND: Duration = Duration::from_secs(3);

/// Waits for the first event `want` accepts, failing after `within`.
async fn next_matching(
    watch: &mut Streaming<WatchEvent>,
    within: Duration,
    what: &str,
    want: impl Fn(&watch_event::Event) -> bool,
) {
    let found = tokio::time::timeout(within, async {
        loop {
            let ev = watch.message().await.expect("rpc").expect("stream open");
            if ev.event.as_ref().is_some_and(&want) {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "{what} did not reach Watch within {within:?}"
    );
}

#[tokio::test]
async fn a_blind_connection_is_healed_by_relists_within_the_documented_bound() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start_with(&node, |c| c.heal_period = HEAL_PERIOD).await;
    let mut rt = one_connection(&shim.cri).await;
    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    watch.message().await.expect("rpc").expect("snapshot");

    // The reader panics on the next Version request: this connection is no longer observed.
    shim.faults
        .blind_on_next_request("/runtime.v1.RuntimeService/Version");
    rt.version(cri::VersionRequest::default())
        .await
        .expect("the call itself is relayed unchanged");
    let text = shim.metrics_text();
    assert_eq!(metric(&text, "podward_shim_observe_errors_total"), 1.0);
    assert_eq!(metric(&text, "podward_shim_unobserved_connections"), 1.0);
    let detail = shim.admin.readiness.detail().unwrap_or_default();
    assert!(detail.contains("not observed"), "{detail:?}");
    assert!(shim.admin.readiness.get(), "still ready: the relay serves");

    // A pod on the blind connection: only a relist can tell the index.
    // Its probe expands $(CONF): the one variable of the environment the index keeps.
    let config = PodSpec::new("unseen")
        .annotation(
            "podward.io/probes",
            r#"{"main":{"livenessProbe":{"exec":{"command":["echo","$(CONF)"]}}}}"#,
        )
        .sandbox_config(&node)
        .expect("sandbox config");
    let sid = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let ran = Instant::now();
    next_matching(&mut watch, BOUND, "the sandbox run blind", |e| {
        matches!(e, watch_event::Event::Sandbox(s)
            if s.kind == SK::SandboxEventCreated as i32
                && s.sandbox.as_ref().is_some_and(|sb| sb.id == sid))
    })
    .await;
    eprintln!("sandbox healed in {:?}", ran.elapsed());

    let cid = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(support::container_config()),
            sandbox_config: Some(config),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .expect("StartContainer");
    let started = Instant::now();
    next_matching(&mut watch, BOUND, "the container started blind", |e| {
        matches!(e, watch_event::Event::Container(c)
        if (c.kind == CK::ContainerEventCreated as i32
            || c.kind == CK::ContainerEventStarted as i32)
            && c.container.as_ref().is_some_and(|ct| {
                ct.id == cid && ct.state == podward_api::shim::v1::ContainerState::Running as i32
            }))
    })
    .await;
    eprintln!("container healed in {:?}", started.elapsed());
    // Read whole (a verbose Status), as kubelet's own calls would have told: the env is there.
    let snap = support::snapshot(&shim.control).await;
    let c = snap
        .containers
        .iter()
        .find(|c| c.id == cid)
        .expect("in the index");
    assert!(
        c.envs
            .iter()
            .any(|kv| kv.key == "CONF" && kv.value == "yes"),
        "{c:?}"
    );

    // Removed blind: gone from the index within the bound too.
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("StopPodSandbox");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("RemovePodSandbox");
    let removed = Instant::now();
    next_matching(&mut watch, BOUND, "the sandbox removed blind", |e| {
        matches!(e, watch_event::Event::Sandbox(s)
            if s.kind == SK::SandboxEventRemoved as i32
                && s.sandbox.as_ref().is_some_and(|sb| sb.id == sid))
    })
    .await;
    eprintln!("removal healed in {:?}", removed.elapsed());

    // The blind connection closes: nothing left unobserved, readiness detail cleared.
    drop(rt);
    let admin = shim.admin.clone();
    wait_until(
        "no connection left unobserved",
        Duration::from_secs(10),
        || {
            metric(&shim.metrics_text(), "podward_shim_unobserved_connections") == 0.0
                && admin.readiness.detail().is_none()
        },
    )
    .await;
    assert!(
        metric(
            &shim.metrics_text(),
            "podward_shim_relists_total{result=\"ok\"}"
        ) >= 3.0
    );
    shim.stop().await;
}
