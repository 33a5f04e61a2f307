//! Isolation between pods at the handler level: targets that accept and never read (a gRPC
//! target whose request is never acknowledged, an HTTP target that answers `200` at once but
//! never reads its large request) must not delay, fail or starve the probes of a healthy target
//! run by the same prober on the same runtime.
//!
//! The runtime has two workers, as the daemon on a two-core node. Every probe socket carries
//! kubelet's `SO_LINGER {on, 1 s}`, so a `close(2)` of a socket whose data the peer never
//! acknowledged can wait a second: anywhere such a close runs on a runtime worker, the healthy
//! probes stall behind it.
//!
//! The hostile targets run on plain threads (not on the runtime under test), as do the healthy
//! target and the clocks that measure it, so only the prober's own stalls are measured.

#[path = "support/handlers.rs"]
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use podward_prober::model::outcome::Outcome;
use podward_prober::probing::probe::Prober;
use podward_prober::spec::{Handler, ProbeType};
use socket2::{Domain, Socket, Type};
use support::{LOCALHOST, get, prober, spec, target};
use tokio::time::Instant;

/// A target on its own thread that accepts connections and never reads them; `answer`, if any,
/// is written at once. Every accepted socket is kept open until the target is dropped.
struct NeverReads {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl NeverReads {
    fn start(answer: Option<&'static [u8]>) -> Self {
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        // The smallest receive buffer: a request of a few KiB is then never acknowledged in
        // full, so the prober's side keeps unacknowledged data and its lingering close waits.
        sock.set_recv_buffer_size(1).expect("rcvbuf");
        sock.bind(&SocketAddr::from((LOCALHOST, 0)).into())
            .expect("bind");
        sock.listen(1024).expect("listen");
        let listener: TcpListener = sock.into();
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let (s, h) = (stop.clone(), held.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        if let Some(answer) = answer {
                            let _ = c.write_all(answer);
                        }
                        h.lock().push(c);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { addr, stop, held }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for NeverReads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.held.lock().clear();
    }
}

/// A healthy HTTP target on its own thread: reads the request head, answers `200 ok`, closes.
fn healthy_target() -> u16 {
    let listener = TcpListener::bind((LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
    port
}

/// A request header of 4,000 bytes: far more than the never-reading targets acknowledge.
fn big_header() -> (String, String) {
    ("X-Pad".to_owned(), "a".repeat(4000))
}

fn is_success(v: &Outcome) -> bool {
    matches!(v, Outcome::Success(_) | Outcome::Warning(_))
}

/// What the healthy probes saw.
#[derive(Debug, Default)]
struct Canary {
    probes: usize,
    failures: Vec<String>,
    /// Start of each probe after the time it was due, in ms.
    lateness_ms: Vec<u64>,
    /// Duration of each probe, in ms.
    duration_ms: Vec<u64>,
}

/// Probes `port` every `period` until `until`, on the runtime under test.
async fn canary(prober: Arc<Prober>, port: u16, period: Duration, until: Instant) -> Canary {
    let spec = spec(get(port, "/healthz", &[]), 1);
    let mut seen = Canary::default();
    let mut due = Instant::now();
    while due < until {
        tokio::time::sleep_until(due).await;
        let started = Instant::now();
        seen.lateness_ms
            .push(started.saturating_duration_since(due).as_millis() as u64);
        let v = prober
            .probe_for_pod("canary", ProbeType::Liveness, &spec, &target(&[], &[]))
            .await;
        seen.duration_ms.push(started.elapsed().as_millis() as u64);
        seen.probes += 1;
        if !is_success(&v) {
            seen.failures.push(format!("{v:?}"));
        }
        // A fixed grid: a late probe does not move the ones after it.
        due += period;
    }
    seen
}

/// Probes `handler` back to back (after `pause`) until `until`; counts the verdicts by kind.
async fn hostile(
    prober: Arc<Prober>,
    pod: String,
    handler: Handler,
    pause: Duration,
    until: Instant,
    done: Arc<AtomicUsize>,
) {
    let spec = spec(handler, 1);
    while Instant::now() < until {
        let _ = prober
            .probe_for_pod(&pod, ProbeType::Liveness, &spec, &target(&[], &[]))
            .await;
        done.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(pause).await;
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn percentile(v: &[u64], p: f64) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_reading_targets_do_not_delay_or_fail_a_healthy_targets_probes() {
    let prober = Arc::new(prober());
    let healthy = healthy_target();
    let period = Duration::from_millis(100);

    // The healthy target alone, for the baseline figures.
    let alone = canary(
        prober.clone(),
        healthy,
        period,
        Instant::now() + Duration::from_secs(1),
    )
    .await;
    assert!(alone.failures.is_empty(), "{:?}", alone.failures);
    let fds_before = open_fds();

    // Several hostile targets of each kind.
    let grpc_targets: Vec<NeverReads> = (0..4).map(|_| NeverReads::start(None)).collect();
    let http_targets: Vec<NeverReads> = (0..4)
        .map(|_| NeverReads::start(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
        .collect();
    let until = Instant::now() + Duration::from_secs(8);
    let done: Arc<AtomicUsize> = Arc::default();
    let mut tasks = Vec::new();
    for (i, t) in grpc_targets.iter().enumerate() {
        for _ in 0..2 {
            let handler = Handler::Grpc {
                port: t.port(),
                service: Some("s".repeat(4000)),
            };
            tasks.push(tokio::spawn(hostile(
                prober.clone(),
                format!("grpc-{i}"),
                handler,
                Duration::ZERO,
                until,
                done.clone(),
            )));
        }
    }
    let (name, value) = big_header();
    for (i, t) in http_targets.iter().enumerate() {
        for _ in 0..5 {
            let handler = get(t.port(), "/", &[(name.as_str(), value.as_str())]);
            tasks.push(tokio::spawn(hostile(
                prober.clone(),
                format!("http-{i}"),
                handler,
                Duration::from_millis(20),
                until,
                done.clone(),
            )));
        }
    }
    let canaries: Vec<_> = (0..2)
        .map(|_| tokio::spawn(canary(prober.clone(), healthy, period, until)))
        .collect();
    let mut seen = Canary::default();
    for c in canaries {
        let c = c.await.expect("canary");
        seen.probes += c.probes;
        seen.failures.extend(c.failures);
        seen.lateness_ms.extend(c.lateness_ms);
        seen.duration_ms.extend(c.duration_ms);
    }
    for t in tasks {
        t.await.expect("hostile");
    }
    let hostile_probes = done.load(Ordering::SeqCst);
    let figures: HashMap<&str, u64> = [
        (
            "alone lateness p99 ms",
            percentile(&alone.lateness_ms, 0.99),
        ),
        (
            "alone duration p99 ms",
            percentile(&alone.duration_ms, 0.99),
        ),
        ("lateness p50 ms", percentile(&seen.lateness_ms, 0.5)),
        ("lateness p99 ms", percentile(&seen.lateness_ms, 0.99)),
        ("lateness max ms", percentile(&seen.lateness_ms, 1.0)),
        ("duration p99 ms", percentile(&seen.duration_ms, 0.99)),
        ("duration max ms", percentile(&seen.duration_ms, 1.0)),
    ]
    .into();
    eprintln!(
        "healthy probes {} failures {} hostile probes {hostile_probes}: {figures:?}",
        seen.probes,
        seen.failures.len()
    );

    assert!(
        hostile_probes > 100,
        "the hostile load ran ({hostile_probes})"
    );
    assert!(
        seen.failures.is_empty(),
        "healthy probes failed: {:?}",
        &seen.failures[..seen.failures.len().min(5)]
    );
    // A lingering close on a worker stalls for up to a second; CPU contention on a shared
    // machine stays well below half of that.
    assert!(
        figures["lateness max ms"] < 500,
        "healthy probes started late: {figures:?}"
    );
    assert!(
        figures["duration max ms"] < 500,
        "healthy probes were slow: {figures:?}"
    );

    // Once the hostile targets are gone, the prober holds no more sockets than before.
    drop(grpc_targets);
    drop(http_targets);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let fds = open_fds();
        if fds <= fds_before + 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{fds} fds open, {fds_before} before the hostile targets"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_at_its_bound_waits_then_fails_its_own_probe_and_other_pods_do_not_notice() {
    let held = prometheus::IntGauge::new("held", "test").expect("gauge");
    let prober = Arc::new(prober().with_pod_sockets(2, held.clone()));
    // Accepts and never answers: each probe holds its socket until its timeout.
    let silent = NeverReads::start(None);
    let healthy = healthy_target();
    let hold = |prober: Arc<Prober>| {
        let port = silent.port();
        tokio::spawn(async move {
            prober
                .probe_for_pod(
                    "greedy",
                    ProbeType::Liveness,
                    &spec(get(port, "/", &[]), 3),
                    &target(&[], &[]),
                )
                .await
        })
    };
    let first = hold(prober.clone());
    let second = hold(prober.clone());
    let deadline = Instant::now() + Duration::from_secs(2);
    while held.get() < 2 {
        assert!(Instant::now() < deadline, "two probes in flight");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The greedy pod's third probe waits for its own, then fails with the reason.
    let third = {
        let (prober, port) = (prober.clone(), silent.port());
        tokio::spawn(async move {
            prober
                .probe_for_pod(
                    "greedy",
                    ProbeType::Liveness,
                    &spec(get(port, "/", &[]), 1),
                    &target(&[], &[]),
                )
                .await
        })
    };
    // Meanwhile another pod probes at once.
    let started = Instant::now();
    let other = prober
        .probe_for_pod(
            "other",
            ProbeType::Liveness,
            &spec(get(healthy, "/", &[]), 1),
            &target(&[], &[]),
        )
        .await;
    assert!(is_success(&other), "{other:?}");
    assert!(started.elapsed() < Duration::from_millis(500));
    match third.await.expect("join") {
        Outcome::Failure(output) => assert!(
            output
                .starts_with("probe not started: this pod already has 2 network probes in flight"),
            "{output}"
        ),
        v => panic!("{v:?}"),
    }
    for p in [first, second] {
        assert!(!is_success(&p.await.expect("join")));
    }
    assert_eq!(held.get(), 0, "every socket given back");
}
