//! A RunPodSandbox that containerd completes but whose answer never reaches the caller (its
//! deadline passes while the shim holds the response back, through the `fault-injection` hook)
//! is indexed as undelivered, with the sandbox ID containerd assigned.

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{Delivery, SandboxEventKind, WatchRequest, watch_event};
use podward_e2e::TestNode;
use support::{InProcShim, lifecycle, sandbox_request, snapshot};

#[tokio::test]
async fn run_pod_sandbox_whose_caller_timed_out_is_reported_undelivered() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let _snapshot = watch.message().await.expect("rpc").expect("snapshot");

    let mut held = shim
        .faults
        .hold_next_response("/runtime.v1.RuntimeService/RunPodSandbox");
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(shim.cri.clone()),
    );
    std::fs::create_dir_all(node.dir().join("logs/late")).expect("log dir");
    let mut req = tonic::Request::new(sandbox_request(&node, "late"));
    // Long enough for containerd to finish, short enough to expire while the shim holds on.
    req.set_timeout(Duration::from_secs(3));
    let mut call = tokio::spawn(async move { client.run_pod_sandbox(req).await });
    tokio::select! {
        _ = held.wait_held() => {}
        r = &mut call => panic!("RunPodSandbox ended before containerd answered it: {r:?}"),
    }
    let err = call
        .await
        .expect("join")
        .expect_err("the caller must give up");
    // tonic enforces the deadline locally ("Timeout expired", CANCELLED) and resets the stream.
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );

    let (id, kinds) = loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .expect("events in time")
            .expect("rpc")
            .expect("open");
        if let Some(watch_event::Event::Sandbox(s)) = ev.event {
            let sb = s.sandbox.expect("sandbox");
            if s.kind == SandboxEventKind::SandboxEventUndelivered as i32 {
                assert_eq!(sb.run_delivery, Delivery::Undelivered as i32);
                assert_eq!(sb.name, "late");
                break (sb.id, s.kind);
            }
        }
    };
    assert_eq!(kinds, SandboxEventKind::SandboxEventUndelivered as i32);
    // containerd really created it: the caller just never learned the ID.
    let mut direct = node.runtime_client().await;
    let st = direct
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .expect("the undelivered sandbox exists")
        .into_inner();
    assert_eq!(
        st.status.expect("status").state,
        cri::PodSandboxState::SandboxReady as i32
    );
    let snap = snapshot(&shim.control).await;
    let entry = snap.sandboxes.iter().find(|s| s.id == id).expect("indexed");
    assert_eq!(entry.run_delivery, Delivery::Undelivered as i32);
    assert!(
        shim.metrics_text()
            .contains("podward_shim_undelivered_total 1")
    );

    // A retried call (what kubelet does next, with attempt 0 again) is delivered normally.
    drop(held);
    let _ = direct
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await;
    let _ = direct
        .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
        .await;
    shim.stop().await;
}
