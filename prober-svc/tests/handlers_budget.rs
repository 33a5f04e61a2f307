//! The node-wide budget for what targets send, at the handler level: hostile targets answering
//! 10 MB heads (as much as Go's limit allows) to many probes of one pod never hold more than the
//! budget, a canary pod's probes beside them stay on time and succeed, the hostile probes fail
//! naming the budget, and everything is given back when the probes end.

#[path = "support/handlers.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use podward_prober::handler::target_budget::TargetBudget;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::ProbeType;
use support::{RawServer, get, prober, response, spec, target};
use tokio::time::Instant;

/// A target that answers every request with a 10 MB status line, then the rest of a head.
struct HugeHeads {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl HugeHeads {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut c) = conn else { continue };
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    let _ = c.read(&mut b);
                    let mut head = b"HTTP/1.1 200 ".to_vec();
                    head.resize(10_000_000, b'a');
                    head.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
                    let _ = c.write_all(&head);
                });
            }
        });
        Self { port, stop }
    }
}

impl Drop for HugeHeads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_heads_stay_within_the_budget_and_a_canary_stays_on_time() {
    let budget = TargetBudget::new(8 << 20, None);
    let prober = Arc::new(prober().with_target_budget(budget.clone()));
    let hostile = HugeHeads::start();
    let healthy = RawServer::start(|_| response(200, &[], b"ok")).await;
    let hostile_spec = spec(get(hostile.port, "/", &[]), 2);
    let canary_spec = spec(get(healthy.port(), "/healthz", &[]), 1);

    let mut attack = Vec::new();
    for _ in 0..16 {
        let (p, s) = (prober.clone(), hostile_spec.clone());
        attack.push(tokio::spawn(async move {
            p.probe_for_pod("hostile", ProbeType::Liveness, &s, &target(&[], &[]))
                .await
        }));
    }
    // While the hostile probes hold what they may, the canary's probes find room at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let got = prober
            .probe_for_pod(
                "canary",
                ProbeType::Liveness,
                &canary_spec,
                &target(&[], &[]),
            )
            .await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(got, Outcome::Success("ok".into()));
        assert!(budget.used() <= budget.limit());
    }
    assert!(
        slowest < Duration::from_millis(250),
        "a canary probe took {slowest:?}"
    );
    let mut named = 0;
    for a in attack {
        match a.await.expect("join") {
            Outcome::Failure(text) if text.contains("memory budget") => named += 1,
            // A probe that had its room may still run out of time reading 10 MB.
            Outcome::Failure(text) if text.contains("deadline exceeded") => {}
            Outcome::Success(_) => {}
            other => panic!("hostile probe: {other:?}"),
        }
    }
    assert!(named > 0, "the probes that found no room say why");
    assert!(
        budget.peak() <= budget.limit(),
        "peak {} over the budget {}",
        budget.peak(),
        budget.limit()
    );
    assert_eq!(budget.used(), 0, "everything is given back");
    drop(hostile);
}
