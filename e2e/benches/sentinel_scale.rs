//! Sentinel scale benchmark (`harness = false`): the real `podward-prober sentinel` process
//! against the e2e API stand-in holding N node leases (in zones of 1,000) and P gated pods.
//!
//! `cargo bench -p podward-e2e --bench sentinel_scale -- [--nodes N] [--pods-per-node P]
//! [--steady S] [--after S]`
//!
//! The leases are renewed inside the stand-in (every node every 10 s, spread evenly: what 5,000
//! probers' PUTs look like to a watch), so every request the stand-in records is the
//! sentinel's. Reports, steady and after a zone of 1,000 nodes stops renewing at once: the
//! sentinel's requests per second by kind, its watches, its RSS (now and peak), and how many
//! nodes and pods it marked (at the default rates: 0.1 nodes/s per zone).

use std::time::{Duration, Instant, SystemTime};

use podward_e2e::apiserver::{MockApiServer, MockOptions, Recorded};
use podward_e2e::{Daemon, free_port};
use serde_json::json;

const NS: &str = "podward";
const ZONE: usize = 1000;
const RENEW: Duration = Duration::from_secs(10);

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rfc3339_micros() -> String {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let t =
        k8s_openapi::jiff::Timestamp::from_microsecond(i64::try_from(d.as_micros()).unwrap_or(0))
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn rss_kb(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn summary(reqs: &[Recorded], from: SystemTime, to: SystemTime) -> String {
    let secs = to
        .duration_since(from)
        .unwrap_or_default()
        .as_secs_f64()
        .max(0.001);
    let within: Vec<&Recorded> = reqs.iter().filter(|r| r.at >= from && r.at < to).collect();
    let kind = |f: &dyn Fn(&Recorded) -> bool| within.iter().filter(|r| f(r)).count();
    let watches = kind(&|r| {
        r.query
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
    });
    let leases = kind(&|r| r.path.contains("/leases"));
    let lists = kind(&|r| r.method == "GET" && r.path == "/api/v1/pods");
    let patches = kind(&|r| r.method == "PATCH" && r.path.ends_with("/status"));
    let events = kind(&|r| r.path.contains("/events"));
    format!(
        "{:.2} req/s ({} in {secs:.0} s): leader/lease {leases} (of them watch requests {watches}), pod lists {lists}, status patches {patches}, events {events}",
        within.len() as f64 / secs,
        within.len()
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = usize::try_from(arg("--nodes", 5000)).unwrap_or(5000);
    let per_node = usize::try_from(arg("--pods-per-node", 30)).unwrap_or(30);
    let steady = Duration::from_secs(arg("--steady", 30));
    let after = Duration::from_secs(arg("--after", 60));
    let mock = MockApiServer::start_with(MockOptions {
        keep_bodies: false,
        history: 20_000,
        ..MockOptions::default()
    })
    .await
    .expect("mock");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    let t = Instant::now();
    for n in 0..nodes {
        let node = format!("node-{n:05}");
        mock.create_lease(
            NS,
            json!({"metadata": {"name": node, "labels": {"podward.io/node-lease": "true",
                "topology.kubernetes.io/zone": format!("zone-{}", n / ZONE)}},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                         "renewTime": rfc3339_micros()}}),
        )
        .expect("lease");
        for p in 0..per_node {
            let name = format!("web-{n:05}-{p:02}");
            mock.put_pod(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
                "spec": {"nodeName": node, "readinessGates": [{"conditionType": "podward.io/ready"}],
                         "containers": [{"name": "app", "image": "app:1"}]},
                "status": {"phase": "Running", "conditions": [
                    {"type": "podward.io/ready", "status": "True",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}));
        }
    }
    println!(
        "stand-in: {nodes} leases in zones of {ZONE}, {} gated pods, loaded in {:.1} s",
        nodes * per_node,
        t.elapsed().as_secs_f64()
    );
    // Renewals: every node every 10 s, spread evenly; the first zone stops when `dropped` is set.
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewer = {
        let mock = std::sync::Arc::new(mock);
        let m = mock.clone();
        let dropped = dropped.clone();
        let task = tokio::spawn(async move {
            let gap = RENEW / u32::try_from(nodes.max(1)).unwrap_or(1);
            let mut tick = tokio::time::interval(gap.max(Duration::from_micros(100)));
            let mut n = 0usize;
            loop {
                tick.tick().await;
                if n < ZONE && dropped.load(std::sync::atomic::Ordering::Relaxed) {
                    n = ZONE;
                }
                let now = rfc3339_micros();
                m.update_lease(NS, &format!("node-{n:05}"), |l| {
                    l["spec"]["renewTime"] = json!(now);
                });
                n = (n + 1) % nodes;
            }
        });
        (mock, task)
    };
    let mock = renewer.0;
    let admin = format!("127.0.0.1:{}", free_port());
    let sentinel = Daemon::spawn(
        "podward-prober",
        &[
            "sentinel",
            "--kubeconfig",
            kubeconfig.to_str().expect("utf8"),
            "--namespace",
            NS,
            "--identity",
            "bench",
            "--admin-addr",
            &admin,
        ],
    )
    .await
    .expect("sentinel");
    sentinel
        .wait_healthy(admin.parse().expect("addr"), Duration::from_secs(60))
        .await
        .expect("healthy");
    // Settle: the leader lease taken, the leases listed.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s0 = SystemTime::now();
    tokio::time::sleep(steady).await;
    let s1 = SystemTime::now();
    let (rss, peak) = rss_kb(sentinel.pid());
    println!(
        "steady ({} s): {}; sentinel RSS {} MiB (peak {} MiB)",
        steady.as_secs(),
        summary(&mock.requests(), s0, s1),
        rss / 1024,
        peak / 1024
    );
    dropped.store(true, std::sync::atomic::Ordering::Relaxed);
    let d0 = SystemTime::now();
    let dropped_at = Instant::now();
    let mut first_mark: Option<Duration> = None;
    while dropped_at.elapsed() < Duration::from_secs(40) + after {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if first_mark.is_none()
            && mock
                .requests()
                .iter()
                .any(|r| r.at >= d0 && r.method == "PATCH" && r.path.ends_with("/status"))
        {
            first_mark = Some(dropped_at.elapsed());
        }
    }
    let d1 = SystemTime::now();
    let reqs = mock.requests();
    let marked_nodes = reqs
        .iter()
        .filter(|r| r.at >= d0 && r.method == "GET" && r.path == "/api/v1/pods")
        .count();
    let (rss, peak) = rss_kb(sentinel.pid());
    println!(
        "zone-0 ({ZONE} nodes) stops renewing: first pod marked {:.1} s after; {}; nodes listed {marked_nodes}; sentinel RSS {} MiB (peak {} MiB)",
        first_mark.map_or(f64::NAN, |d| d.as_secs_f64()),
        summary(&reqs, d0, d1),
        rss / 1024,
        peak / 1024
    );
    println!(
        "at the normal rate (0.1 nodes/s per zone) the zone's {ZONE} nodes take {:.1} h to mark",
        ZONE as f64 / 0.1 / 3600.0
    );
    let all = mock.requests();
    let watches = all
        .iter()
        .filter(|r| {
            r.query
                .get("watch")
                .is_some_and(|w| w == "true" || w == "1")
        })
        .count();
    let lists = all
        .iter()
        .filter(|r| {
            r.method == "GET" && r.path.ends_with("/leases") && !r.query.contains_key("watch")
        })
        .count();
    println!("watches opened over the whole run: {watches} (lease lists: {lists})");
    renewer.1.abort();
}
