//! The shim in-process in front of a fake containerd: a plain HTTP/2 server that answers gRPC
//! paths with canned frames, so forwarding details (trailers, metadata, unknown methods,
//! streaming, upstream restarts, undelivered results) are checked byte for byte.
//!
//! The real containerd is exercised by `e2e/tests/shim_*.rs`.

#[path = "support/fake_upstream.rs"]
mod support;

use std::time::Duration;

use futures::StreamExt;
use podward_api::cri;
use podward_api::shim::v1::{Delivery, SandboxEventKind, WatchRequest, watch_event};
use podward_api::test_util::eventually;
use support::{FakeUpstream, TestShim};
use tonic::Code;

#[tokio::test]
async fn unary_call_passes_with_metadata_and_trailers_and_is_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    let mut watch = shim
        .lifecycle()
        .await
        .watch(WatchRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("rpc").expect("snapshot");
    assert!(matches!(first.event, Some(watch_event::Event::Snapshot(_))));

    let mut rt = shim.runtime().await;
    let mut req = tonic::Request::new(cri::VersionRequest {
        version: "v1".into(),
    });
    req.metadata_mut()
        .insert("x-echo", "hello".parse().expect("md"));
    let resp = rt.version(req).await.expect("Version through the shim");
    assert_eq!(resp.get_ref().runtime_name, "fake");
    // The fake upstream echoes the header into a trailer: both directions pass untouched.
    assert_eq!(
        resp.metadata()
            .get("x-echoed")
            .and_then(|v| v.to_str().ok()),
        Some("hello")
    );

    let run = rt
        .run_pod_sandbox(support::run_request("pod-a"))
        .await
        .expect("RunPodSandbox")
        .into_inner();
    assert_eq!(run.pod_sandbox_id, "sb-pod-a");
    let ev = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("event in time")
        .expect("rpc")
        .expect("event");
    let Some(watch_event::Event::Sandbox(s)) = ev.event else {
        panic!("expected a sandbox event, got {ev:?}")
    };
    assert_eq!(s.kind, SandboxEventKind::SandboxEventCreated as i32);
    let sb = s.sandbox.expect("sandbox");
    assert_eq!((sb.id.as_str(), sb.name.as_str()), ("sb-pod-a", "pod-a"));
    assert_eq!(sb.run_delivery, Delivery::Delivered as i32);
    let metrics = shim.metrics_text();
    assert!(
        metrics.contains(
            "podward_shim_requests_total{method=\"/runtime.v1.RuntimeService/Version\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn unknown_method_error_and_message_pass_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    let direct = support::call_unknown(up.socket())
        .await
        .expect_err("must fail");
    let proxied = support::call_unknown(&shim.cri_socket())
        .await
        .expect_err("must fail");
    assert_eq!(proxied.code(), Code::Unimplemented);
    assert_eq!(proxied.code(), direct.code());
    assert_eq!(proxied.message(), direct.message());
}

#[tokio::test]
async fn bidirectional_stream_is_forwarded_frame_by_frame() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    // The fake echoes each message as it arrives: a proxy that buffered whole bodies would
    // never answer the first message before the request stream ends.
    let (tx, rx) = tokio::sync::mpsc::channel::<cri::VersionRequest>(4);
    let mut responses = support::echo_stream(&shim.cri_socket(), rx).await;
    for i in 0..3 {
        tx.send(cri::VersionRequest {
            version: format!("m{i}"),
        })
        .await
        .expect("send");
        let got = tokio::time::timeout(Duration::from_secs(5), responses.next())
            .await
            .expect("echo in time")
            .expect("open")
            .expect("ok");
        assert_eq!(got.version, format!("m{i}"));
    }
}

#[tokio::test]
async fn unavailable_while_containerd_is_down_then_reconnects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("containerd.sock");
    let shim = TestShim::start(dir.path()).await;
    let mut rt = shim.runtime().await;
    let err = rt
        .version(cri::VersionRequest::default())
        .await
        .expect_err("no upstream yet");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(!shim.ready(), "not ready without containerd");

    let up = FakeUpstream::start(&sock).await;
    eventually("shim connects", Duration::from_secs(10), || {
        let mut rt = rt.clone();
        async move { rt.version(cri::VersionRequest::default()).await.is_ok() }
    })
    .await;
    eventually("ready", Duration::from_secs(5), || async { shim.ready() }).await;

    // containerd restarts: calls fail fast meanwhile, then work again on the same client.
    drop(up);
    let _up = FakeUpstream::start(&sock).await;
    eventually("shim reconnects", Duration::from_secs(10), || {
        let mut rt = rt.clone();
        async move { rt.version(cri::VersionRequest::default()).await.is_ok() }
    })
    .await;
}

#[cfg(feature = "fault-injection")]
#[tokio::test]
async fn run_pod_sandbox_whose_caller_timed_out_is_undelivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    let mut held = shim
        .faults
        .hold_next_response("/runtime.v1.RuntimeService/RunPodSandbox");
    let mut watch = shim
        .lifecycle()
        .await
        .watch(WatchRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let _snapshot = watch.message().await.expect("rpc");
    let mut rt = shim.runtime().await;
    let mut req = tonic::Request::new(support::run_request("late").into_inner());
    req.set_timeout(Duration::from_millis(300));
    let call = tokio::spawn(async move { rt.run_pod_sandbox(req).await });
    held.wait_held().await;
    let err = call.await.expect("join").expect_err("caller must time out");
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.message())
            .await
            .expect("event in time")
            .expect("rpc")
            .expect("event");
        if let Some(watch_event::Event::Sandbox(s)) = ev.event {
            let sb = s.sandbox.expect("sandbox");
            assert_eq!(sb.id, "sb-late");
            assert_eq!(sb.run_delivery, Delivery::Undelivered as i32);
            kinds.push(s.kind);
        }
    }
    assert_eq!(
        kinds,
        vec![
            SandboxEventKind::SandboxEventCreated as i32,
            SandboxEventKind::SandboxEventUndelivered as i32
        ]
    );
    assert!(
        shim.metrics_text()
            .contains("podward_shim_undelivered_total 1")
    );
}

/// A ListContainers of the containers labelled `app=<app>`.
fn labelled_list(app: &str) -> cri::ListContainersRequest {
    cri::ListContainersRequest {
        filter: Some(cri::ContainerFilter {
            label_selector: [("app".to_owned(), app.to_owned())].into(),
            ..Default::default()
        }),
    }
}

/// Longer than the shim's read interval for repeating Lists (250 ms).
const PACE: Duration = Duration::from_millis(300);

/// kubelet relists with the same request every second. A large answer that repeats is
/// recognised while relayed; once it has, the next one is only digested, not kept — and when that
/// one hides a change, the change reaches the index on the following relist. The Lists here come
/// at kubelet's pace, slower than the read interval, so every one is read.
#[tokio::test]
async fn a_large_repeated_list_is_not_kept_and_a_change_it_hid_is_decoded_on_the_next_relist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    let mut rt = shim.runtime().await;
    let list = || labelled_list("big");
    let indexed = |n: f64| {
        let shim = &shim;
        eventually(
            "containers indexed",
            Duration::from_secs(5),
            move || async move { shim.metric("podward_shim_index_containers") == n },
        )
    };
    let counted = |name: &'static str, n: f64| {
        let shim = &shim;
        eventually(name, Duration::from_secs(5), move || async move {
            shim.metric(name) == n
        })
    };

    up.set_containers(100); // ~310 KiB: above the size that is not kept after a repeat
    // kubelet's pace (relists a second apart): past the read interval every time.
    let paced = || tokio::time::sleep(PACE);
    let first = rt.list_containers(list()).await.expect("list").into_inner();
    assert_eq!(first.containers.len(), 100);
    indexed(100.0).await;
    for _ in 0..2 {
        // The second is a repeat (kept: nothing was known to repeat yet), the third a repeat
        // that was never kept.
        paced().await;
        rt.list_containers(list()).await.expect("list");
    }
    counted("podward_shim_answers_unchanged_total", 2.0).await;

    up.set_containers(101);
    paced().await;
    let changed = rt.list_containers(list()).await.expect("list").into_inner();
    assert_eq!(changed.containers.len(), 101, "relayed whole all the same");
    counted("podward_shim_answers_deferred_total", 1.0).await;
    assert_eq!(
        shim.metric("podward_shim_index_containers"),
        100.0,
        "the change was not kept, so not decoded"
    );
    paced().await;
    rt.list_containers(list()).await.expect("list");
    // A filtered List adds what it names and removes nothing: 100 + 101 other IDs.
    indexed(201.0).await;
    paced().await;
    rt.list_containers(list()).await.expect("list");
    counted("podward_shim_answers_unchanged_total", 3.0).await;
    assert_eq!(shim.metric("podward_shim_answers_deferred_total"), 1.0);
    assert_eq!(shim.metric("podward_shim_answers_unread_total"), 0.0);
}

/// A client that lists many times a second: while the large answer repeats, the ones that come
/// within the read interval of the last one read are relayed unread. A change hidden in one of
/// them is found by the first List read after the interval and decoded from the next.
#[tokio::test]
async fn lists_within_the_read_interval_are_relayed_unread_and_a_change_still_arrives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;
    let mut rt = shim.runtime().await;
    let list = || labelled_list("fast");
    up.set_containers(100);
    // News, then a repeat (kept: nothing was known to repeat yet), then answers within the
    // interval of that read, as fast as the client lists: unread.
    let started = std::time::Instant::now();
    while shim.metric("podward_shim_answers_unread_total") < 2.0 {
        let r = rt.list_containers(list()).await.expect("list").into_inner();
        assert_eq!(r.containers.len(), 100, "relayed whole, read or not");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no List was relayed unread"
        );
    }
    assert_eq!(shim.metric("podward_shim_index_containers"), 100.0);

    up.set_containers(101);
    let changed = rt.list_containers(list()).await.expect("list").into_inner();
    assert_eq!(changed.containers.len(), 101, "relayed whole all the same");
    // The client goes on listing as fast as it can; the change is in the index within the
    // interval and two Lists (the one that finds it, the one decoded).
    let changed_at = std::time::Instant::now();
    loop {
        rt.list_containers(list()).await.expect("list");
        if shim.metric("podward_shim_index_containers") == 201.0 {
            break;
        }
        assert!(
            changed_at.elapsed() < Duration::from_secs(5),
            "the change never reached the index"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shim.metric("podward_shim_answers_deferred_total"), 1.0);
}
