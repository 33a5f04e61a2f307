//! Hostile and careless clients on both of the shim's sockets cost bounded resources, never the
//! relay of other connections: handshake deadlines, the Watch subscriber cap, junk and floods
//! that the reader cannot follow.

#[path = "support/fake_upstream.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::WatchRequest;
use podward_api::test_util::eventually;
use support::{FakeUpstream, TestShim, metric};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Whether the peer closed `s` (EOF or reset) within `within`, reading and discarding whatever
/// it sent first.
async fn closed_within(s: &mut UnixStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn idle_and_partial_preface_connections_are_closed_at_the_handshake_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start_with(dir.path(), |c| {
        c.handshake_timeout = Duration::from_millis(300);
    })
    .await;
    let control = dir.path().join("shim.sock");
    let mut stuck = Vec::new();
    for i in 0..30 {
        let path = if i % 3 == 2 {
            control.clone()
        } else {
            shim.cri_socket()
        };
        let mut s = UnixStream::connect(&path).await.expect("connect");
        if i % 3 == 1 {
            // Half a preface, then nothing.
            s.write_all(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..12])
                .await
                .expect("write");
        }
        stuck.push(s);
    }
    // A well-behaved client meanwhile is served.
    let mut rt = shim.runtime().await;
    rt.version(cri::VersionRequest::default())
        .await
        .expect("Version while 30 connections stall");
    for (i, s) in stuck.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(5)).await,
            "stalled connection {i} still open"
        );
    }
    let m = shim.metrics_text();
    assert_eq!(
        metric(&m, "podward_shim_handshake_timeouts_total{socket=\"cri\"}"),
        20.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "podward_shim_handshake_timeouts_total{socket=\"control\"}"
        ),
        10.0,
        "{m}"
    );
    // A connection that did speak is not timed out, however long it then stays idle.
    tokio::time::sleep(Duration::from_millis(600)).await;
    rt.version(cri::VersionRequest::default())
        .await
        .expect("the same idle client connection still works");
}

#[tokio::test]
async fn watch_subscribers_beyond_the_cap_are_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start_with(dir.path(), |c| c.max_subscribers = 2).await;
    let mut a = shim
        .lifecycle()
        .await
        .watch(WatchRequest::default())
        .await
        .expect("first")
        .into_inner();
    let _b = shim
        .lifecycle()
        .await
        .watch(WatchRequest::default())
        .await
        .expect("second")
        .into_inner();
    a.message().await.expect("snapshot").expect("open");
    let err = shim
        .lifecycle()
        .await
        .watch(WatchRequest::default())
        .await
        .expect_err("third is over the cap");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--max-subscribers 2"), "{err:?}");
    assert!(
        shim.metrics_text()
            .contains("podward_shim_watch_rejected_total 1")
    );
    // Snapshot is not capped, and a slot frees when a subscriber leaves.
    shim.lifecycle()
        .await
        .snapshot(podward_api::shim::v1::SnapshotRequest {})
        .await
        .expect("snapshot");
    drop(a);
    eventually("a slot frees", Duration::from_secs(5), || async {
        shim.lifecycle()
            .await
            .watch(WatchRequest::default())
            .await
            .is_ok()
    })
    .await;
}

/// A frame header.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn junk_stops_observing_that_connection_only_and_a_continuation_flood_is_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _up = FakeUpstream::start(&dir.path().join("containerd.sock")).await;
    let shim = TestShim::start(dir.path()).await;

    // Junk instead of a preface: relayed to containerd, which closes it; counted once.
    let mut junk = UnixStream::connect(shim.cri_socket())
        .await
        .expect("connect");
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert!(closed_within(&mut junk, Duration::from_secs(5)).await);

    // A HEADERS without END_HEADERS followed by 320 KiB of CONTINUATION: the reader holds none
    // of it (each fragment is decoded as it passes), so it follows the flood as the server
    // does (a real server cuts a longer one itself) and keeps observing the connection.
    let mut flood = UnixStream::connect(shim.cri_socket())
        .await
        .expect("connect");
    flood
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("preface");
    flood
        .write_all(&frame(0x4, 0, 0, &[]))
        .await
        .expect("settings");
    flood
        .write_all(&frame(0x1, 0, 1, &[0x82]))
        .await
        .expect("headers");
    let chunk = frame(0x9, 0, 1, &vec![0x82; 16 << 10]);
    let writer = tokio::spawn(async move {
        for _ in 0..20 {
            if flood.write_all(&chunk).await.is_err() {
                break;
            }
        }
        flood
    });
    let mut flood = writer.await.expect("writer");
    // The server's answer to the flood (its SETTINGS, then a GOAWAY) came through the relay.
    let mut first = [0u8; 9];
    flood
        .read_exact(&mut first)
        .await
        .expect("server bytes relayed");
    assert_eq!(first[3], 0x4, "containerd's SETTINGS reach the client");
    assert_eq!(
        metric(&shim.metrics_text(), "podward_shim_observe_errors_total"),
        1.0,
        "only the junk connection is given up"
    );

    // Other connections are observed and served as ever.
    let mut rt = shim.runtime().await;
    rt.run_pod_sandbox(support::run_request("after-flood"))
        .await
        .expect("RunPodSandbox");
    let m = shim.metrics_text();
    assert_eq!(
        metric(&m, "podward_shim_observe_errors_total"),
        1.0,
        "only the junk connection: {m}"
    );
    eventually(
        "the good call is indexed",
        Duration::from_secs(5),
        || async {
            shim.metrics_text()
                .contains("podward_shim_index_sandboxes 1")
        },
    )
    .await;
}
