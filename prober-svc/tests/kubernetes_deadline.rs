//! Deadlines of the API writers on a real TCP connection: an API server that takes a write and
//! then says nothing more (a half-open connection, a peer gone without a FIN) costs the write
//! one read timeout; the client drops that connection and the retried write completes on a new
//! one.

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/readiness.rs"]
mod readiness;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use podward_prober::clock::Clock;
use podward_prober::kubernetes::client::{self, Deadlines};
use podward_prober::kubernetes::gate::{Gate, KubeWriter};
use podward_prober::kubernetes::limit::TokenBucket;
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::model::api_pod::{
    ApiPod, ConditionStatus, GateCondition, PodPhase, RestartPolicy,
};
use podward_prober::pods::view::readiness::PodReadiness;
use readiness::Scripted;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads one HTTP/1.1 request (head and a `Content-Length` body); false at EOF.
async fn read_request(c: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match c.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match c.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

#[derive(Debug)]
enum Seen {
    /// The first connection's write arrived; the server now says nothing on it.
    Held,
    /// The client closed the held connection, this long after the write arrived.
    Dropped(Duration),
    /// The write arrived on a new connection and was answered.
    Answered,
}

#[tokio::test]
async fn a_half_open_connection_is_dropped_and_the_gate_write_completes_on_a_new_one() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut held, _) = listener.accept().await.expect("accept");
        assert!(read_request(&mut held).await, "the first write");
        let t = Instant::now();
        let _ = tx.send(Seen::Held);
        // Say nothing; wait for the client to give the connection up.
        let mut b = [0u8; 1];
        let _ = held.read(&mut b).await;
        let _ = tx.send(Seen::Dropped(t.elapsed()));
        let (mut fresh, _) = listener.accept().await.expect("accept");
        assert!(read_request(&mut fresh).await, "the retried write");
        let body = apiserver::pod("web", "u-web", "11", true, None).to_string();
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        fresh.write_all(resp.as_bytes()).await.expect("answer");
        let _ = tx.send(Seen::Answered);
        // Keep the connection open as a server would.
        let _ = fresh.read(&mut b).await;
    });

    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    let client = client::build(
        config,
        Arc::new(TokenBucket::new(100.0, 100)),
        Deadlines::within(3 * READ_TIMEOUT, READ_TIMEOUT),
    )
    .expect("client");
    let metrics = ApiMetrics::new(None).expect("metrics");
    let gate = Gate::new("podward.io/ready", metrics.clone());
    let source = Arc::new(Scripted(Mutex::new(HashMap::from([(
        "u-web".to_owned(),
        PodReadiness::NotReady {
            container: "app".into(),
            reason: "ReadinessProbeFailed",
            message: "container app: Readiness probe failed: x".into(),
        },
    )]))));
    tokio::spawn(gate.clone().run(
        Arc::new(KubeWriter::new(client)),
        source,
        Clock::starting_at(1_800_000_000 * 1_000_000_000),
        std::future::pending(),
    ));
    gate.api_pod(&ApiPod {
        uid: "u-web".into(),
        namespace: "shop".into(),
        name: "web".into(),
        resource_version: "10".into(),
        restart_policy: RestartPolicy::Always,
        phase: PodPhase::Running,
        deleting: false,
        grace_seconds: Some(30),
        deletion_grace_seconds: None,
        probes_annotation: None,
        gated: true,
        condition: Some(GateCondition {
            status: ConditionStatus::True,
            reason: String::new(),
            message: String::new(),
            last_transition_time: "2026-11-23T09:00:00Z".into(),
        }),
        containers: Vec::new(),
    });

    assert!(matches!(next(&mut seen).await, Seen::Held));
    match next(&mut seen).await {
        Seen::Dropped(after) => assert!(
            after >= READ_TIMEOUT.mul_f64(0.9) && after < 3 * READ_TIMEOUT,
            "dropped after one read timeout: {after:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut seen).await, Seen::Answered));
    let deadline = Instant::now() + Duration::from_secs(5);
    while metrics.gate_writes.with_label_values(&["ok"]).get() == 0 {
        assert!(Instant::now() < deadline, "the retried write completes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metrics.gate_writes.with_label_values(&["error"]).get(), 1);
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("in time")
        .expect("server")
}
