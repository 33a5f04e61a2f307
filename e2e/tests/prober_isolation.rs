//! One pod's probe targets never slow, fail or kill another pod's containers, on a real
//! containerd, shim and prober.
//!
//! Canary pods have 1 s HTTP liveness probes (`failureThreshold: 1`: one failed probe is a kill)
//! against healthy targets the test runs on loopback, which record when each probe arrives.
//! Hostile pods, several containers each, aim their probes at targets that accept and never
//! read: gRPC probes whose 4,000-byte `service` is never acknowledged, and HTTP probes with a
//! 4,000-byte header that are answered `200` at once but never read. Every probe socket carries
//! kubelet's `SO_LINGER {on, 1 s}`, so a close that waits for the peer on one of the prober's
//! runtime threads stalls every pod's probes. While the hostile pods run, every canary probe
//! must arrive on time (no gap over 1.2 × the period), none may fail, no canary is killed, and
//! once the hostile pods are gone the prober's open files are back to their baseline.

#[path = "support/prober.rs"]
mod support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use parking_lot::Mutex;
use serde_json::json;
use support::*;
use tokio::time::Instant;

/// A target that accepts and never reads; `answer`, if any, is written at once. The receive
/// buffer is the smallest, so a request of a few KiB is never acknowledged in full.
struct NeverReads {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl NeverReads {
    fn start(answer: Option<&'static [u8]>) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        // Accepted sockets take the listener's buffer size (the kernel clamps 1 to its minimum).
        setsockopt(&listener, sockopt::RcvBuf, &1).expect("rcvbuf");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (accepted, stop, held) = (
            Arc::<AtomicUsize>::default(),
            Arc::<AtomicBool>::default(),
            Arc::<Mutex<Vec<TcpStream>>>::default(),
        );
        let (a, s, h) = (accepted.clone(), stop.clone(), held.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        if let Some(answer) = answer {
                            let _ = c.write_all(answer);
                        }
                        a.fetch_add(1, Ordering::SeqCst);
                        h.lock().push(c);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self {
            port,
            accepted,
            stop,
            held,
        }
    }
}

impl Drop for NeverReads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.held.lock().clear();
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

const PERIOD: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_targets_never_delay_fail_or_kill_other_pods() {
    let env = Env::start().await;
    let pid = env.prober.pid();

    // Canaries: one failed liveness probe would be a kill.
    let recorders: Vec<Recorder> = (0..2).map(|_| Recorder::start()).collect();
    let canaries = run_canaries(&env, &recorders).await;
    // Steady state before the hostile pods: probes arrive, the fd count settles.
    let calm_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (i, r) in recorders.iter().enumerate() {
        let (gap, n) = r.largest_gap(calm_from + Duration::from_secs(2), Instant::now());
        assert!(
            n >= 3 && gap <= PERIOD.mul_f64(1.2),
            "canary {i} before the hostile pods: {n} probes, gap {gap:?}"
        );
    }
    let fds_before = open_fds(pid);

    // Hostile pods: never-read gRPC and never-read successful HTTP targets, several containers
    // each.
    let grpc: Vec<NeverReads> = (0..3).map(|_| NeverReads::start(None)).collect();
    let http: Vec<NeverReads> = (0..3)
        .map(|_| NeverReads::start(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
        .collect();
    let service = "s".repeat(4000);
    let pad = "a".repeat(4000);
    let mut hostile = Vec::new();
    for (i, t) in grpc.iter().enumerate() {
        let port = t.port;
        let service = service.clone();
        hostile.push(
            run_pod(&env, &format!("hostile-grpc-{i}"), 3, move |_| {
                json!({"readinessProbe": {"grpc": {"port": port, "service": service},
                    "periodSeconds": 1, "timeoutSeconds": 1}})
            })
            .await,
        );
    }
    for (i, t) in http.iter().enumerate() {
        let port = t.port;
        let pad = pad.clone();
        hostile.push(
            run_pod(&env, &format!("hostile-http-{i}"), 3, move |_| {
                let get = json!({"path": "/", "port": port, "httpHeaders": [{"name": "X-Pad", "value": pad}]});
                json!({"readinessProbe": {"httpGet": get, "periodSeconds": 1, "timeoutSeconds": 1},
                       "livenessProbe": {"httpGet": get, "periodSeconds": 1, "timeoutSeconds": 1}})
            })
            .await,
        );
    }
    let attack_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let attack_to = Instant::now();
    let hostile_probes: usize = grpc
        .iter()
        .chain(&http)
        .map(|t| t.accepted.load(Ordering::SeqCst))
        .sum();
    assert!(
        hostile_probes >= 200,
        "the hostile probes ran: {hostile_probes}"
    );

    let mut problems = Vec::new();
    for (i, r) in recorders.iter().enumerate() {
        let (gap, n) = r.largest_gap(attack_from, attack_to);
        eprintln!("canary {i}: {n} probes during the attack, largest gap {gap:?}");
        if gap > PERIOD.mul_f64(1.2) {
            problems.push(format!(
                "canary {i}: a gap of {gap:?} between probes ({n} probes)"
            ));
        }
    }
    problems.extend(canary_problems(&env, &canaries).await);
    let held = sample(
        &scrape(env.prober_admin).await.expect("scrape"),
        &["podward_prober_sockets_held"],
    );
    eprintln!(
        "hostile probes {hostile_probes}, prober fds before {fds_before}, during {}, sockets held {held:?}",
        open_fds(pid)
    );
    assert!(problems.is_empty(), "{problems:#?}");

    // The hostile pods go: the prober's open files come back to their baseline.
    for pod in hostile {
        pod.delete().await.expect("delete hostile pod");
    }
    drop(grpc);
    drop(http);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let fds = open_fds(pid);
        if fds <= fds_before + 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prober fds {fds}, baseline {fds_before}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
