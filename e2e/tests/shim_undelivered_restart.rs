//! A shim restart cuts nothing kubelet cannot retry safely, and hides nothing from the
//! housekeeper, against a real containerd:
//!
//! - a RunPodSandbox whose answer never reached its caller is still *undelivered* in the next
//!   shim's index (the previous shim left it behind at exit, the new one marks it after its
//!   rebuild): the housekeeper can still find the leak;
//! - a RunPodSandbox still held when shutdown's bound ran out is cut, and its sandbox (which
//!   containerd made) is undelivered in the next shim's index;
//! - a StopContainer in flight at SIGTERM (a container that waits out its grace period) is not
//!   cut at the plain shutdown grace: it finishes, and its caller gets the answer.

#[path = "support/shim.rs"]
mod support;

use std::time::{Duration, Instant};

use podward_api::cri;
use podward_api::shim::v1::Delivery;
use podward_e2e::{ContainerSpec, Driver, PodSpec, TestNode};
use support::{InProcShim, sandbox_request, snapshot};

/// The ID of the sandbox named `name`, as containerd itself lists it.
async fn sandbox_in_containerd(node: &TestNode, name: &str) -> String {
    let mut direct = node.runtime_client().await;
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let list = direct
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .expect("list")
            .into_inner();
        if let Some(s) = list
            .items
            .iter()
            .find(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
        {
            return s.id.clone();
        }
        assert!(Instant::now() < end, "containerd never made sandbox {name}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn delivery_after_restart(node: &TestNode, id: &str) -> i32 {
    let shim = InProcShim::start(node).await;
    let snap = snapshot(&shim.control).await;
    let d = snap
        .sandboxes
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.run_delivery)
        .expect("the sandbox is in the new shim's index");
    shim.stop().await;
    d
}

#[tokio::test]
async fn an_undelivered_sandbox_is_still_undelivered_after_a_shim_restart() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let mut held = shim
        .faults
        .hold_next_response("/runtime.v1.RuntimeService/RunPodSandbox");
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(shim.cri.clone()),
    );
    std::fs::create_dir_all(node.dir().join("logs/late")).expect("log dir");
    let mut req = tonic::Request::new(sandbox_request(&node, "late"));
    req.set_timeout(Duration::from_secs(3));
    let call = tokio::spawn(async move { client.run_pod_sandbox(req).await });
    held.wait_held().await;
    assert!(call.await.expect("join").is_err(), "the caller gave up");
    let id = sandbox_in_containerd(&node, "late").await;
    support::wait_until(
        "the sandbox indexed undelivered",
        Duration::from_secs(10),
        || {
            shim.metrics_text()
                .contains("podward_shim_undelivered_total 1")
        },
    )
    .await;
    drop(held);
    shim.stop().await;

    assert_eq!(
        delivery_after_restart(&node, &id).await,
        Delivery::Undelivered as i32,
        "the restarted shim must not hide the undelivered sandbox"
    );
}

#[tokio::test]
async fn a_run_pod_sandbox_cut_at_shutdown_is_undelivered_in_the_next_shim() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start_with(&node, |c| {
        c.max_shutdown_grace = Duration::from_secs(2);
    })
    .await;
    let held = shim
        .faults
        .hold_next_response("/runtime.v1.RuntimeService/RunPodSandbox");
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(shim.cri.clone()),
    );
    std::fs::create_dir_all(node.dir().join("logs/cut")).expect("log dir");
    let mut req = tonic::Request::new(sandbox_request(&node, "cut"));
    // kubelet's own bound on a RunPodSandbox: far past the shim's shutdown bound.
    req.set_timeout(Duration::from_secs(240));
    let call = tokio::spawn(async move { client.run_pod_sandbox(req).await });
    let mut held = held;
    held.wait_held().await;
    let id = sandbox_in_containerd(&node, "cut").await;
    let stopping = Instant::now();
    shim.stop().await;
    let took = stopping.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "held until the shutdown bound (2 s), then cut: {took:?}"
    );
    assert!(
        call.await.expect("join").is_err(),
        "the caller never got it"
    );
    drop(held);

    assert_eq!(
        delivery_after_restart(&node, &id).await,
        Delivery::Undelivered as i32,
        "the sandbox of a cut RunPodSandbox must be undelivered in the next shim"
    );
}

#[tokio::test]
async fn a_stop_container_in_flight_at_sigterm_finishes_and_is_answered() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let driver = Driver::connect(&shim.cri).await.expect("driver");
    // A container that ignores SIGTERM: StopContainer waits out its 4 s grace, then kills.
    let spec = PodSpec::new("stubborn").container(ContainerSpec::new(
        "app",
        &["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
    ));
    let pod = driver.run_pod(&node, spec).await.expect("run pod");
    let id = pod.container_id("app").expect("container started");
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(shim.cri.clone()),
    );
    // kubelet's deadline on it: the grace period plus its runtime request timeout.
    let mut req = tonic::Request::new(cri::StopContainerRequest {
        container_id: id,
        timeout: 4,
    });
    req.set_timeout(Duration::from_secs(4 + 120));
    let started = Instant::now();
    let call = tokio::spawn(async move { client.stop_container(req).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGTERM to the shim with the default 1.5 s grace: the call is waited for, not cut.
    let stopping = tokio::spawn(shim.stop());
    let answer = call.await.expect("join");
    let took = started.elapsed();
    assert!(
        answer.is_ok(),
        "StopContainer was cut by the shim's shutdown after {took:?}: {answer:?}"
    );
    assert!(
        took >= Duration::from_secs(4),
        "it waited out the grace: {took:?}"
    );
    stopping.await.expect("the shim stops");
    drop(pod);
}
