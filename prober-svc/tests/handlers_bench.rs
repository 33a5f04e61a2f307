//! Handler throughput: how many HTTP and TCP probes one thread sustains, measured as probes per
//! CPU-second of that thread (so a loaded machine lowers the rate, not the cost figure).
//! Ignored by default; run with
//! `cargo test -p podward-prober --release --test handlers_bench -- --ignored --nocapture`.

mod handlers_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use handlers_support::{prober, spec, target};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use podward_prober::probe::{ProbeResult, ProbeVerdict};
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};

/// Concurrent probes in flight.
const CONCURRENCY: usize = 256;
/// How long each run lasts.
const RUN: Duration = Duration::from_secs(5);

/// This thread's CPU time (utime + stime from /proc/thread-self/stat, in clock ticks of 10 ms).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// An HTTP/1 server on its own multi-thread runtime (another thread), answering 200 "ok".
fn server() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            loop {
                let Ok((sock, _)) = listener.accept().await else { continue };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), svc).await;
                });
            }
        });
    });
    rx.recv().expect("server address")
}

fn run(handler: Handler) -> (u64, u64, Duration, Duration) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let prober = Rc::new(prober());
        let spec = Arc::new(spec(handler, 1));
        let cpu0 = thread_cpu();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..CONCURRENCY {
            let (prober, spec) = (prober.clone(), spec.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                while started.elapsed() < RUN {
                    match prober.probe(ProbeType::Liveness, &spec, &target(&[], &[])).await {
                        ProbeVerdict::Result { result: ProbeResult::Success, .. } => ok += 1,
                        other => {
                            if failed == 0 {
                                eprintln!("first failure: {other:?}");
                            }
                            failed += 1;
                        }
                    }
                }
                (ok, failed)
            }));
        }
        let (mut ok, mut failed) = (0, 0);
        for t in tasks {
            let (o, f) = t.await.expect("task");
            ok += o;
            failed += f;
        }
        (ok, failed, started.elapsed(), thread_cpu() - cpu0)
    })
}

fn report(name: &str, (ok, failed, wall, cpu): (u64, u64, Duration, Duration)) {
    let total = ok + failed;
    println!(
        "{name}: {total} probes ({failed} failed) in {wall:.2?} wall, {cpu:.2?} prober-thread CPU => {:.0} probes/s, {:.0} probes per CPU-second",
        total as f64 / wall.as_secs_f64(),
        total as f64 / cpu.as_secs_f64().max(0.01),
    );
}

#[test]
#[ignore = "benchmark"]
fn bench_http_and_tcp_probes_on_one_thread() {
    let addr = server();
    let port = PortRef::Number(addr.port().into());
    let http = Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: None,
        path: "/healthz".into(),
        port: port.clone(),
        headers: vec![],
    });
    report("tcp", run(Handler::TcpSocket { host: None, port }));
    report("http", run(http));
}
