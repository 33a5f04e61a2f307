//! No false failure from the prober's own starvation, on real parts: the manager, workers and
//! HTTP handler as the daemon wires them (with its tick-lag starvation meter), probing loopback
//! HTTP servers that run on a runtime of their own. The prober's runtime is then starved by busy
//! tasks (each spins for tens of milliseconds between yields, so every task, the timer and the
//! I/O driver wait seconds for a turn) until probes are late by more than their 1 s timeout.
//! Targets that answer at once: zero failures counted, zero kills. A target that answers only
//! after the timeout: every probe counted is a failure, and its liveness probe kills, as kubelet's
//! would.

#[path = "support/handlers.rs"]
mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use podward_api::prober::v1::ProbeType;
use podward_prober::clock::Clock;
use podward_prober::consequences::kill::Killer;
use podward_prober::metrics::{FineHistogram, Metrics};
use podward_prober::model::{ContainerInfo, PodInfo, RunState};
use podward_prober::pods::manager::{Manager, Settings};
use podward_prober::probing::starvation::TickLag;
use podward_prober::publish::event::Events;
use podward_prober::stopper::{StopError, Stopper};
use support::{RawServer, Reply, prober, response};

/// Pods probing the fast target.
const FAST_PODS: usize = 100;
/// How long the runtime is starved.
const STARVE: Duration = Duration::from_secs(8);
/// When the slow target answers: long after the probes' 1 s timeout, and after the whole run. A
/// target answering within the longest stretch the starved runtime leaves a probe unpolled (a few
/// seconds here) can be seen as a success by that late poll: the handler's timeout (tokio's
/// `timeout`) looks at the answer before the deadline, as a late-scheduled Go client would.
const SLOW_ANSWER: Duration = Duration::from_secs(60);
/// Busy tasks, and how long each spins before yielding.
const BUSY_TASKS: usize = 4;
const SLICE: Duration = Duration::from_millis(1200);

#[derive(Default)]
struct CountKills(AtomicU64);

impl Stopper for CountKills {
    fn stop_container(&self, _: String, _: i64) -> BoxFuture<'_, Result<(), StopError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
}

fn pod(uid: &str, annotation: String, clock: &Clock) -> PodInfo {
    let started = clock.now_ns() - 60_000_000_000;
    let c = ContainerInfo {
        id: format!("{uid}-c").into(),
        name: "c".into(),
        attempt: 0,
        state: RunState::Running,
        created_at_ns: started - 1,
        started_at_ns: started,
        ports: Vec::new().into(),
        env: Vec::new().into(),
        pod_grace_seconds: Some(30),
        stop_requested_at_ns: 0,
    };
    PodInfo {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        sandbox_id: format!("sb-{uid}"),
        sandbox_created_at_ns: 1,
        ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        probes_annotation: Some(annotation),
        stop_requested_at_ns: 0,
        containers: BTreeMap::from([(c.id.to_string(), Arc::new(c))]),
        api: None,
    }
}

fn http(kind: &str, port: u16, failure_threshold: u32) -> String {
    format!(
        r#""{kind}":{{"httpGet":{{"port":{port}}},"periodSeconds":1,"timeoutSeconds":1,"failureThreshold":{failure_threshold}}}"#
    )
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// (probes run, consecutive failures) of `uid`'s probe of type `ty`.
fn runs(m: &Manager, uid: &str, ty: ProbeType) -> (u64, u32) {
    let st = m.view().status(Some(uid));
    st.pods[0].containers[0]
        .probes
        .iter()
        .find(|p| p.r#type == ty as i32)
        .map(|p| (p.probes_run, p.consecutive_failures))
        .unwrap_or_default()
}

#[test]
fn a_starved_prober_fails_no_fast_target_and_every_slow_one() {
    // The targets: a runtime and thread of their own, so starving the prober does not slow them.
    let (ports_tx, ports_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let targets = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("targets runtime");
        rt.block_on(async move {
            let Reply::Raw(ok) = response(200, &[], b"ok") else {
                unreachable!("response is raw bytes")
            };
            let fast = RawServer::start({
                let ok = ok.clone();
                move |_| Reply::Raw(ok.clone())
            })
            .await;
            let slow = RawServer::start(move |_| Reply::After(SLOW_ANSWER, ok.clone())).await;
            let _ = ports_tx.send((fast.port(), slow.port()));
            let _ = done_rx.await;
        });
    });
    let (fast, slow) = ports_rx.recv().expect("target ports");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("prober runtime");
    rt.block_on(async move {
        let clock = Clock::system();
        let metrics = Arc::new(Metrics::unregistered().expect("metrics"));
        let kills = Arc::new(CountKills::default());
        let killer = Killer::new(
            kills.clone(),
            None,
            metrics.clone(),
            Events::new(Vec::new()),
            clock,
        );
        let manager = Manager::new(
            Arc::new(prober()),
            killer,
            Events::new(Vec::new()),
            metrics.clone(),
            clock,
            Settings {
                starvation: Some(Arc::new(TickLag::start())),
                ..Settings::default()
            },
        );
        for i in 0..FAST_PODS {
            let spec = format!("{{\"c\":{{{}}}}}", http("livenessProbe", fast, 1));
            manager.update_pod(pod(&format!("fast{i}"), spec, &clock));
        }
        // The slow target: a readiness probe (keeps counting) and a liveness probe (kills).
        let spec = format!(
            "{{\"c\":{{{},{}}}}}",
            http("readinessProbe", slow, 1),
            http("livenessProbe", slow, 3)
        );
        manager.update_pod(pod("slow", spec, &clock));
        // Past the start-up jitter: every fast probe has answered.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (ok0, _) = metrics.series().totals();
        assert!(ok0 >= FAST_PODS as u64, "warm-up: {ok0} successes");
        let late0 = metrics.fine_lateness().counts();

        let busy = Arc::new(AtomicBool::new(true));
        let tasks: Vec<_> = (0..BUSY_TASKS)
            .map(|_| {
                let busy = busy.clone();
                tokio::spawn(async move {
                    while busy.load(Ordering::Relaxed) {
                        spin(SLICE);
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        // This thread is not one of the runtime's workers: it keeps time while they are busy.
        std::thread::sleep(STARVE);
        busy.store(false, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("busy task");
        }
        let late: Vec<u64> = metrics
            .fine_lateness()
            .counts()
            .iter()
            .zip(&late0)
            .map(|(a, b)| a - b)
            .collect();
        // Recover, and let the slow target's probes fail again unstarved.
        tokio::time::sleep(Duration::from_secs(4)).await;

        let p99 = FineHistogram::quantile(&late, 0.99).unwrap_or_default();
        let starved = metrics
            .probes_starved
            .with_label_values(&["Liveness"])
            .get()
            + metrics
                .probes_starved
                .with_label_values(&["Readiness"])
                .get();
        let (ok1, _) = metrics.series().totals();
        let (slow_ready_runs, slow_ready_failures) = runs(&manager, "slow", ProbeType::Readiness);
        let (slow_live_runs, slow_live_failures) = runs(&manager, "slow", ProbeType::Liveness);
        println!(
            "lateness p99 {p99:?}, starved probes {starved}, successes {}, kills {}, slow readiness {slow_ready_failures}/{slow_ready_runs} failed, slow liveness {slow_live_failures}/{slow_live_runs}",
            ok1 - ok0,
            kills.0.load(Ordering::SeqCst)
        );
        assert!(
            p99 > Duration::from_secs(1),
            "the runtime was not starved enough: lateness p99 {p99:?}"
        );
        // A fast target's liveness probe kills at its first failure (threshold 1): only the slow
        // target's liveness probe may kill, once.
        assert_eq!(kills.0.load(Ordering::SeqCst), 1, "kills");
        assert!(starved > 0, "no probe timed out while starved");
        assert_eq!(
            (slow_live_runs, slow_live_failures),
            (3, 3),
            "the slow target's liveness probe failed 3 times in a row, then killed"
        );
        assert!(slow_ready_runs >= 3, "slow readiness ran {slow_ready_runs}");
        assert_eq!(
            u64::from(slow_ready_failures),
            slow_ready_runs,
            "every probe of the slow target is a failure"
        );
        manager.stop_all();
    });
    let _ = done_tx.send(());
    targets.join().expect("targets thread");
}
