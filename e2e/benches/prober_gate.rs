//! Readiness-gate scale benchmark (`harness = false`): the prober's Kubernetes API side with
//! 10,000 gated pods on one node, against the mock API server on loopback.
//!
//! `cargo bench -p podward-e2e --bench prober_gate -- [--pods N] [--period S] [--periods N]
//! [--flap PERCENT] [--qps Q] [--burst B]`
//!
//! The real reflector (`kubernetes::pods::reflect`, kube-rs watcher through a kubeconfig) lists
//! and watches the node's pods; the real gate writer (`kubernetes::gate::Gate::run` with
//! `KubeWriter`, server-side apply through the QPS-limited client) writes conditions; only the
//! readiness source is scripted (the probe side is measured by `prober_scale`). Every pod starts
//! with its condition True and ready. Reports:
//! - RSS growth from the reflector's view of N pods (this process; the mock's pods are made
//!   before the baseline);
//! - writes while stable (every pod touched each period, readiness unchanged): must be 0;
//! - with `--flap` % of the pods flipping each period: API writes/s (mean from the first flip to
//!   the last write, busiest 10 s and 1 s windows) against the QPS limit and burst, and the delay
//!   from a result change to its condition write (p50/p99/max);
//! - writes after the flapping stops and the last flips are written: must be 0.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use podward_e2e::apiserver::{MockApiServer, MockOptions, pod_object};
use podward_e2e::{ContainerSpec, PodSpec};
use podward_prober::clock::Clock;
use podward_prober::kubernetes::gate::{Gate, KubeWriter, ReadinessSource};
use podward_prober::kubernetes::limit::TokenBucket;
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::kubernetes::pods::{PodSink, reflect};
use podward_prober::kubernetes::{DEFAULT_GATE_CONDITION, client};
use podward_prober::model::api_pod::ApiPod;
use podward_prober::pods::view::readiness::{PodReadiness, REASON_READINESS};
use rand::seq::IndexedRandom;
use serde_json::json;
use tokio::sync::watch;

const NODE: &str = "bench-node";

struct Args {
    pods: usize,
    period: Duration,
    periods: usize,
    flap_percent: f64,
    qps: f64,
    burst: u32,
}

fn args() -> Args {
    let mut a = Args {
        pods: 10_000,
        period: Duration::from_secs(10),
        periods: 6,
        flap_percent: 1.0,
        qps: 50.0,
        burst: 100,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--pods" => a.pods = v.parse().expect("--pods N"),
            "--period" => a.period = Duration::from_secs_f64(v.parse().expect("--period S")),
            "--periods" => a.periods = v.parse().expect("--periods N"),
            "--flap" => a.flap_percent = v.parse().expect("--flap PERCENT"),
            "--qps" => a.qps = v.parse().expect("--qps Q"),
            "--burst" => a.burst = v.parse().expect("--burst B"),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The reflector's view, kept as the manager keeps it (the `ApiPod` facts per UID).
#[derive(Default)]
struct View {
    pods: Mutex<HashMap<String, ApiPod>>,
    gate: Mutex<Option<Gate>>,
}

impl PodSink for View {
    fn apply(&self, pod: ApiPod) {
        if let Some(g) = &*self.gate.lock() {
            g.api_pod(&pod);
        }
        self.pods.lock().insert(pod.uid.clone(), pod);
    }
    fn delete(&self, uid: &str) {
        if let Some(g) = &*self.gate.lock() {
            g.api_gone(uid);
        }
        self.pods.lock().remove(uid);
    }
    fn known(&self) -> Vec<String> {
        self.pods.lock().keys().cloned().collect()
    }
}

/// Scripted readiness: the UIDs that are not ready.
#[derive(Default)]
struct Script {
    unready: Mutex<std::collections::HashSet<String>>,
}

impl ReadinessSource for Script {
    fn readiness(&self, uid: &str) -> PodReadiness {
        if self.unready.lock().contains(uid) {
            PodReadiness::NotReady {
                container: "app".into(),
                reason: REASON_READINESS,
                message:
                    "container app: Readiness probe failed: HTTP probe failed with statuscode: 503"
                        .into(),
            }
        } else {
            PodReadiness::Ready
        }
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(a));
}

async fn run(a: Args) {
    let mock = MockApiServer::start_with(MockOptions {
        keep_bodies: false,
        ..MockOptions::default()
    })
    .await
    .expect("mock");
    let mut names = Vec::with_capacity(a.pods);
    for i in 0..a.pods {
        let spec = PodSpec::new(&format!("p{i:05}"))
            .annotation(
                "podward.io/probes",
                r#"{"app":{"readinessProbe":{"httpGet":{"path":"/ready","port":8080}}}}"#,
            )
            .container(ContainerSpec::new("app", &["sleep", "3600"]));
        let mut obj = pod_object(&spec, NODE);
        obj["spec"]["readinessGates"] = json!([{ "conditionType": DEFAULT_GATE_CONDITION }]);
        obj["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({"type": DEFAULT_GATE_CONDITION, "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        names.push((spec.uid.clone(), spec.name.clone()));
        mock.put_pod(obj);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    let config = client::load_config(Some(&kubeconfig))
        .await
        .expect("config");
    // One client for the reflector and the writer here (the daemon gives each its own, the
    // writer's with deadlines): a watch must not be cut by a read timeout.
    let kube = client::build(
        config,
        Arc::new(TokenBucket::new(a.qps, a.burst)),
        client::Deadlines::watches(),
    )
    .expect("client");
    let metrics = ApiMetrics::new(None).expect("metrics");
    let gate = Gate::new(DEFAULT_GATE_CONDITION, metrics.clone());
    let view = Arc::new(View::default());
    *view.gate.lock() = Some(gate.clone());
    let script = Arc::new(Script::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    // Reflector: list + watch of N pods.
    let rss0 = rss_kib();
    let t = Instant::now();
    let reflector = tokio::spawn({
        let (view, metrics, kube, stopped) =
            (view.clone(), metrics.clone(), kube.clone(), stopped.clone());
        async move {
            reflect(
                kube::Api::<Pod>::all(kube),
                NODE,
                DEFAULT_GATE_CONDITION,
                &*view,
                &metrics,
                stopped(),
            )
            .await;
        }
    });
    while view.pods.lock().len() < a.pods {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = rss_kib();
    println!(
        "reflector: {} pods listed in {:.2}s; RSS {} -> {} KiB: +{:.1} MiB ({:.0} B/pod)",
        a.pods,
        listed.as_secs_f64(),
        rss0,
        rss1,
        (rss1.saturating_sub(rss0)) as f64 / 1024.0,
        (rss1.saturating_sub(rss0)) as f64 * 1024.0 / a.pods as f64
    );

    let writer = tokio::spawn({
        let (gate, kube, script, stopped) =
            (gate.clone(), kube.clone(), script.clone(), stopped.clone());
        async move {
            gate.run(
                Arc::new(KubeWriter::new(kube)),
                script,
                Clock::system(),
                stopped(),
            )
            .await;
        }
    });
    let writes = |since: SystemTime| {
        mock.requests()
            .into_iter()
            .filter(|r| r.at >= since && r.method == "PATCH" && r.path.ends_with("/status"))
            .collect::<Vec<_>>()
    };

    // Stable: every pod touched each period, nothing changes.
    let stable_from = SystemTime::now();
    for _ in 0..2 {
        for (uid, _) in &names {
            gate.touch(uid);
        }
        tokio::time::sleep(a.period.min(Duration::from_secs(5))).await;
    }
    let stable_writes = writes(stable_from).len();
    println!("stable: {stable_writes} writes with every pod touched twice (want 0)");

    // Flapping: flap% of the pods flip each period.
    let per_period = ((a.pods as f64) * a.flap_percent / 100.0).round() as usize;
    let mut flips: Vec<(String, SystemTime)> = Vec::new();
    let flap_from = SystemTime::now();
    let mut rng = rand::rng();
    for _ in 0..a.periods {
        let tick = Instant::now();
        let chosen: Vec<&(String, String)> = names.choose_multiple(&mut rng, per_period).collect();
        let now = SystemTime::now();
        {
            let mut un = script.unready.lock();
            for (uid, _) in &chosen {
                if !un.remove(uid) {
                    un.insert(uid.clone());
                }
            }
        }
        for (uid, name) in &chosen {
            gate.touch(uid);
            flips.push((name.clone(), now));
        }
        tokio::time::sleep(a.period.saturating_sub(tick.elapsed())).await;
    }
    let flap_end = SystemTime::now();
    // Let the last writes land, then check the node is quiet.
    let deadline = Instant::now() + Duration::from_secs(60);
    while metrics.gate_pending.get() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet_from = SystemTime::now();
    for (uid, _) in &names {
        gate.touch(uid);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet_writes = writes(quiet_from).len();

    let all = writes(flap_from);
    let in_flap: Vec<_> = all.iter().filter(|r| r.at < quiet_from).collect();
    // Writes per 1 s window.
    let secs = |t: SystemTime| t.duration_since(flap_from).unwrap_or_default().as_secs();
    let mut per_sec: HashMap<u64, usize> = HashMap::new();
    for r in &in_flap {
        *per_sec.entry(secs(r.at)).or_default() += 1;
    }
    let max_per_sec = per_sec.values().copied().max().unwrap_or(0);
    // Sustained: the busiest 10 s window, per second.
    let last_sec = per_sec.keys().copied().max().unwrap_or(0);
    let max_10s = (0..=last_sec)
        .map(|s| (s..s + 10).filter_map(|k| per_sec.get(&k)).sum::<usize>())
        .max()
        .unwrap_or(0) as f64
        / 10.0;
    // From the first flip to the last write (the writes after the flapping included).
    let last = in_flap
        .iter()
        .map(|r| r.at)
        .max()
        .unwrap_or(flap_end)
        .max(flap_end);
    let span = last
        .duration_since(flap_from)
        .unwrap_or_default()
        .as_secs_f64();
    // Delay: each flip to the first write of that pod after it.
    let mut by_name: HashMap<String, Vec<SystemTime>> = HashMap::new();
    for r in &in_flap {
        let name = r.path.rsplit('/').nth(1).unwrap_or("").to_owned();
        by_name.entry(name).or_default().push(r.at);
    }
    let mut delays: Vec<f64> = Vec::new();
    let mut coalesced = 0usize;
    for (name, at) in &flips {
        match by_name
            .get(name)
            .and_then(|ts| ts.iter().filter(|t| *t >= at).min())
        {
            Some(w) => delays.push(w.duration_since(*at).unwrap_or_default().as_secs_f64() * 1e3),
            None => coalesced += 1,
        }
    }
    delays.sort_by(f64::total_cmp);
    println!(
        "flapping: {} pods × {:.1}% = {per_period} flips per {:.0}s period, {} periods: {} flips, {} writes ({coalesced} flips coalesced away)",
        a.pods,
        a.flap_percent,
        a.period.as_secs_f64(),
        a.periods,
        flips.len(),
        in_flap.len()
    );
    println!(
        "writes/s: mean {:.1}, busiest 10 s window {max_10s:.1}/s, busiest 1 s window {max_per_sec} (QPS limit {}, burst {})",
        in_flap.len() as f64 / span,
        a.qps,
        a.burst
    );
    println!(
        "delay result change -> condition write: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&delays, 0.5),
        pct(&delays, 0.99),
        delays.last().copied().unwrap_or(f64::NAN)
    );
    println!("quiet: {quiet_writes} writes after the flapping stopped, every pod touched (want 0)");
    let _ = stop_tx.send(true);
    let _ = writer.await;
    let _ = reflector.await;
}
