//! The reflector's watch on a real TCP connection whose peer goes silent: the API server (or a
//! load balancer on the way) vanishes without a FIN or a RST, so nothing more arrives and nothing
//! sent is acknowledged. The watch client finds the connection dead within its idle bound and the
//! watch resumes on a new connection; a healthy watch that merely has no events stays open.
//!
//! The silence is real: the stand-in API server and the client run in a network namespace of the
//! test's own, where an iptables rule drops every packet of the watch's connection (and only of
//! it: the resumed watch's new connection goes through).

#[path = "support/apiserver.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use podward_prober::kubernetes::client::{self, Deadlines, IdleCheck};
use podward_prober::kubernetes::limit::TokenBucket;
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::kubernetes::pods::{PodSink, reflect};
use podward_prober::model::api_pod::ApiPod;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Records what the reflector hands over.
#[derive(Default)]
struct Sink {
    pods: Mutex<BTreeMap<String, ApiPod>>,
}

impl PodSink for Sink {
    fn apply(&self, pod: ApiPod) {
        self.pods.lock().insert(pod.name.clone(), pod);
    }
    fn delete(&self, uid: &str) {
        self.pods.lock().retain(|_, p| p.uid != uid);
    }
    fn known(&self) -> Vec<String> {
        self.pods.lock().values().map(|p| p.uid.clone()).collect()
    }
}

/// A watch request the stand-in holds open: the client's port, the request's path and query,
/// and where to send its events.
struct Watch {
    client_port: u16,
    target: String,
    events: mpsc::UnboundedSender<serde_json::Value>,
}

/// Reads one request head; `None` at EOF.
async fn read_head(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).into_owned();
            buf.drain(..i + 4);
            return Some(head);
        }
        match c.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// An HTTP/1.1 API server for pods: a list answers one pod (`web`) at resourceVersion 10; a
/// watch gets a chunked `200` and then whatever the test sends through its [`Watch`].
async fn serve(listener: TcpListener, watches: mpsc::UnboundedSender<Watch>) {
    loop {
        let Ok((mut conn, peer)) = listener.accept().await else {
            return;
        };
        let watches = watches.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(head) = read_head(&mut conn, &mut buf).await {
                let target = head
                    .lines()
                    .next()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or_default()
                    .to_owned();
                if !target.contains("watch=true") {
                    let body = support::pod_list(
                        "10",
                        vec![support::pod("web", "u-web", "9", false, None)],
                        None,
                    )
                    .to_string();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let (tx, mut rx) = mpsc::unbounded_channel();
                let _ = watches.send(Watch {
                    client_port: peer.port(),
                    target,
                    events: tx,
                });
                // The watch lasts as long as the connection: events as the test sends them.
                while let Some(ev) = rx.recv().await {
                    let line = format!("{ev}\n");
                    let chunk = format!("{:x}\r\n{line}\r\n", line.len());
                    if conn.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                return;
            }
        });
    }
}

/// Runs `ip`/`iptables` in the calling thread's network namespace.
fn run(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Drops every packet from and to local port `port` (one connection's client side).
fn blackhole(port: u16) {
    let port = port.to_string();
    for dir in ["--sport", "--dport"] {
        run(
            "iptables",
            &["-w", "-A", "INPUT", "-p", "tcp", dir, &port, "-j", "DROP"],
        );
    }
}

/// Runs `scenario` on a current-thread runtime in a thread moved into a new network namespace
/// (loopback up, no rules): the sockets it makes, and the commands it runs, live there.
fn in_own_netns<F>(scenario: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("a network namespace of the test's own (needs root)");
        run("ip", &["link", "set", "lo", "up"]);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(scenario());
    })
    .join()
    .expect("the scenario");
}

/// The reflector over `deadlines`' client against the stand-in at `addr`.
fn start_reflector(addr: std::net::SocketAddr, deadlines: Deadlines, sink: Arc<Sink>) {
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    let client =
        client::build(config, Arc::new(TokenBucket::new(100.0, 100)), deadlines).expect("client");
    tokio::spawn(async move {
        let metrics = ApiMetrics::new(None).expect("metrics");
        let api: kube::Api<Pod> = kube::Api::all(client);
        reflect(
            api,
            "node-a",
            "podward.io/ready",
            &*sink,
            &metrics,
            std::future::pending(),
        )
        .await;
    });
}

async fn next_watch(watches: &mut mpsc::UnboundedReceiver<Watch>, within: Duration) -> Watch {
    tokio::time::timeout(within, watches.recv())
        .await
        .unwrap_or_else(|_| panic!("no watch request within {within:?}"))
        .expect("the stand-in runs")
}

async fn eventually(what: &str, within: Duration, f: impl Fn() -> bool) {
    let until = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < until, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn added(name: &str, uid: &str, rv: &str) -> serde_json::Value {
    json!({"type": "ADDED", "object": support::pod(name, uid, rv, false, None)})
}

/// The watch client of these tests: the reflector's deadlines with a short idle check (a silent
/// peer found within 3 s), so that a test takes seconds, not the production 40 s.
fn quick_watches() -> Deadlines {
    Deadlines {
        idle: IdleCheck {
            idle: Duration::from_secs(1),
            interval: Duration::from_secs(1),
            probes: 2,
        },
        ..Deadlines::watches()
    }
}

/// Room for kube-rs's first backoff and the new connection after the connection is found dead.
const RESUME: Duration = Duration::from_secs(4);

/// The reflector watches through a client with `deadlines`; the watch's connection goes silent;
/// a watch must arrive on a new connection within `within`, resumed from the listed version,
/// and its events reach the sink. Returns how long the resume took.
async fn silent_peer(deadlines: Deadlines, within: Duration) -> Duration {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut watches) = mpsc::unbounded_channel();
    tokio::spawn(serve(listener, tx));
    let sink = Arc::new(Sink::default());
    start_reflector(addr, deadlines, sink.clone());

    let first = next_watch(&mut watches, Duration::from_secs(10)).await;
    assert!(
        first.target.contains("resourceVersion=10"),
        "{}",
        first.target
    );
    eventually("the listed pod", Duration::from_secs(5), || {
        sink.pods.lock().contains_key("web")
    })
    .await;
    // The peer vanishes: nothing of that connection gets through either way from now on.
    blackhole(first.client_port);
    let silent_at = Instant::now();

    let second = next_watch(&mut watches, within).await;
    let resumed_after = silent_at.elapsed();
    assert_ne!(second.client_port, first.client_port, "a new connection");
    assert!(
        second.target.contains("resourceVersion=10"),
        "resumes from the last version: {}",
        second.target
    );
    second
        .events
        .send(added("late", "u-late", "11"))
        .expect("send");
    eventually("the resumed watch's event", Duration::from_secs(5), || {
        sink.pods.lock().contains_key("late")
    })
    .await;
    drop(first);
    resumed_after
}

#[test]
fn a_watch_whose_peer_goes_silent_resumes_on_a_new_connection_within_the_idle_bound() {
    in_own_netns(|| async {
        let deadlines = quick_watches();
        let after = silent_peer(deadlines, deadlines.idle.bound() + RESUME).await;
        assert!(
            after >= deadlines.idle.bound().mul_f64(0.8),
            "found dead by the idle check, not before it: {after:?}"
        );
        eprintln!("watch resumed {after:?} after its connection went silent");
    });
}

/// The production settings, measured (about 40 s): `cargo test -p podward-prober --test
/// kubernetes_watch_idle -- --ignored --nocapture`.
#[test]
#[ignore = "takes the production idle bound (40 s); run to measure it"]
fn with_the_production_idle_check_a_silent_watch_resumes_within_45_s() {
    in_own_netns(|| async {
        let after = silent_peer(Deadlines::watches(), Duration::from_secs(45)).await;
        eprintln!("watch resumed {after:?} after its connection went silent");
    });
}

#[tokio::test]
async fn a_quiet_watch_on_a_live_connection_stays_open_far_beyond_the_idle_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut watches) = mpsc::unbounded_channel();
    tokio::spawn(serve(listener, tx));
    let sink = Arc::new(Sink::default());
    let deadlines = quick_watches();
    start_reflector(addr, deadlines, sink.clone());

    let first = next_watch(&mut watches, Duration::from_secs(10)).await;
    // No event, no bookmark, for four idle bounds: the peer's kernel answers the keep-alive
    // probes, so the watch is neither dropped nor repeated.
    let quiet = 4 * deadlines.idle.bound();
    if let Ok(again) = tokio::time::timeout(quiet, watches.recv()).await {
        panic!(
            "a quiet, healthy watch was dropped and repeated: {:?}",
            again.map(|w| w.target)
        );
    }
    first
        .events
        .send(added("late", "u-late", "11"))
        .expect("send");
    eventually(
        "the event on the original watch",
        Duration::from_secs(5),
        || sink.pods.lock().contains_key("late"),
    )
    .await;
}
