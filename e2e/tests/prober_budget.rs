//! What all probe targets send together stays within the prober's budget, on a real
//! containerd, shim and prober: hostile pods whose targets answer every probe with a 10 MB head
//! (Go's limit allows it) never take the prober's memory past its limit nor delay another pod's
//! probes.
//!
//! The prober gets a 64 MiB budget (what a 256 MiB memory limit gives it by default). Canary pods
//! have 1 s HTTP liveness probes (`failureThreshold: 1`: one failed probe is a kill) against
//! healthy targets that record when each probe arrives. Hostile pods, six containers each, have
//! 1 s readiness probes against targets that answer with a 10 MB status line and a `Location`
//! field. While they run, every canary probe arrives on time (no gap over 1.2 × the period), none
//! fails, no canary is killed, the prober's resident memory stays under 256 MiB, and the budget's
//! gauge never passes the budget; 20 s after the hostile pods are gone the prober's memory is
//! back near where it was before them. The test prints the canaries' lateness (p99), the RSS
//! peak, and the RSS 20 s after the hostile pods are gone.

#[path = "support/prober.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::time::Instant;

const BUDGET: u64 = 64 << 20;
const MEMORY_LIMIT: u64 = 256 << 20;
const PERIOD: Duration = Duration::from_secs(1);

/// A target that answers each request with a 10 MB head, each connection on its own thread.
struct HugeHeads {
    port: u16,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl HugeHeads {
    fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (answered, stop) = (Arc::<AtomicUsize>::default(), Arc::<AtomicBool>::default());
        let (a, s) = (answered.clone(), stop.clone());
        let mut head = b"HTTP/1.1 200 ".to_vec();
        head.resize(9_900_000, b'a');
        head.extend_from_slice(b"\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n");
        let head: Arc<[u8]> = head.into();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut c) = conn else { continue };
                let head = head.clone();
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    let _ = c.read(&mut b);
                    a.fetch_add(1, Ordering::SeqCst);
                    let _ = c.write_all(&head);
                });
            }
        });
        Self {
            port,
            answered,
            stop,
        }
    }
}

impl Drop for HugeHeads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The prober's resident memory in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_heads_stay_within_the_budget_and_never_delay_other_pods() {
    let env = Env::start_with(vec![format!("--target-memory-budget-bytes={BUDGET}")]).await;
    let pid = env.prober.pid();

    let recorders: Vec<Recorder> = (0..2).map(|_| Recorder::start()).collect();
    let canaries = run_canaries(&env, &recorders).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rss_before = rss(pid);

    let targets: Vec<HugeHeads> = (0..3).map(|_| HugeHeads::start()).collect();
    let mut hostile = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let port = t.port;
        hostile.push(
            run_pod(&env, &format!("hostile-{i}"), 6, move |_| {
                json!({"readinessProbe": {"httpGet": {"path": "/", "port": port},
                    "periodSeconds": 1, "timeoutSeconds": 1}})
            })
            .await,
        );
    }
    let attack_from = Instant::now();
    let mut rss_peak = 0;
    let mut budget_peak: f64 = 0.0;
    while attack_from.elapsed() < Duration::from_secs(30) {
        rss_peak = rss_peak.max(rss(pid));
        if let Ok(page) = scrape(env.prober_admin).await {
            let held = sample(&page, &["podward_prober_target_memory_bytes"]).unwrap_or(0.0);
            budget_peak = budget_peak.max(held);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let attack_to = Instant::now();
    let answered: usize = targets
        .iter()
        .map(|t| t.answered.load(Ordering::SeqCst))
        .sum();

    let mut problems = Vec::new();
    let mut all_gaps = Vec::new();
    for (i, r) in recorders.iter().enumerate() {
        let gaps = r.gaps(attack_from, attack_to);
        let largest = gaps.iter().max().copied().unwrap_or(Duration::MAX);
        if gaps.len() < 20 || largest > PERIOD.mul_f64(1.2) {
            problems.push(format!(
                "canary {i}: {} probes, largest gap {largest:?}",
                gaps.len() + 1
            ));
        }
        all_gaps.extend(gaps);
    }
    all_gaps.sort();
    let p99 = all_gaps
        .get(all_gaps.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    let lateness_p99 = p99.saturating_sub(PERIOD);
    problems.extend(canary_problems(&env, &canaries).await);
    if rss_peak >= MEMORY_LIMIT {
        problems.push(format!("prober RSS peaked at {rss_peak} bytes"));
    }
    if budget_peak > BUDGET as f64 {
        problems.push(format!("the budget's gauge peaked at {budget_peak}"));
    }

    for pod in hostile {
        pod.delete().await.expect("delete hostile pod");
    }
    drop(targets);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss_after = rss(pid);
    let held_after = sample(
        &scrape(env.prober_admin).await.expect("scrape"),
        &["podward_prober_target_memory_bytes"],
    );
    eprintln!(
        "hostile answers {answered}; canary lateness p99 {lateness_p99:?} ({} gaps); prober RSS before {} MiB, peak {} MiB, 20 s after {} MiB; budget peak {} MiB, after {held_after:?}",
        all_gaps.len(),
        rss_before >> 20,
        rss_peak >> 20,
        rss_after >> 20,
        (budget_peak as u64) >> 20,
    );
    assert!(answered >= 30, "the hostile probes ran: {answered}");
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(held_after, Some(0.0), "everything given back");
    // The heads' memory went back to the system with the probes that read them.
    assert!(
        rss_after < rss_before + BUDGET / 2,
        "prober RSS {} MiB 20 s after the hostile pods went (before them: {} MiB)",
        rss_after >> 20,
        rss_before >> 20
    );
}
