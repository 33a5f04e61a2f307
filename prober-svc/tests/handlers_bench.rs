//! Handler throughput: how many HTTP and TCP probes one thread sustains, measured as probes per
//! CPU-second of that thread (so a loaded machine lowers the rate, not the cost figure).
//! Ignored by default; run with
//! `cargo test -p podward-prober --release --test handlers_bench -- --ignored --nocapture`.

#[path = "support/handlers.rs"]
mod support;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use support::{prober, spec, target};

/// Concurrent probes in flight.
const CONCURRENCY: usize = 256;
/// How long each run lasts.
const RUN: Duration = Duration::from_secs(5);

/// Loopback addresses the servers listen on; probes rotate over them so that TIME-WAIT entries
/// spread over many 4-tuples, as probes to many pods do.
const ADDRESSES: u8 = 16;

/// This thread's (user, system) CPU time from /proc/thread-self/stat (clock ticks of 10 ms).
fn thread_cpu() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let tick = |i: usize| Duration::from_millis(fields[i].parse::<u64>().expect("ticks") * 10);
    (tick(11), tick(12))
}

/// HTTP/1 servers on 127.0.0.1..=127.0.0.16, one port, on their own runtime, answering 200 "ok".
fn server() -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async move {
            let first = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let port = first.local_addr().expect("addr").port();
            let mut listeners = vec![first];
            for i in 2..=ADDRESSES {
                let addr = SocketAddr::from(([127, 0, 0, i], port));
                listeners.push(tokio::net::TcpListener::bind(addr).await.expect("bind"));
            }
            tx.send(port).expect("send");
            let mut accepts = Vec::new();
            for listener in listeners {
                accepts.push(tokio::spawn(async move {
                    loop {
                        let Ok((sock, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(|_req| async {
                                Ok::<_, Infallible>(http::Response::new(Full::new(
                                    Bytes::from_static(b"ok"),
                                )))
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(sock), svc)
                                .await;
                        });
                    }
                }));
            }
            futures::future::join_all(accepts).await;
        });
    });
    rx.recv().expect("server address")
}

type Run = (u64, u64, Duration, (Duration, Duration));

fn run(handler: Handler) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let prober = Rc::new(prober());
        let spec = Arc::new(spec(handler, 1));
        let cpu0 = thread_cpu();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..CONCURRENCY {
            let (prober, spec) = (prober.clone(), spec.clone());
            let ip = IpAddr::V4(Ipv4Addr::new(
                127,
                0,
                0,
                1 + (i % usize::from(ADDRESSES)) as u8,
            ));
            tasks.push(tokio::task::spawn_local(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                while started.elapsed() < RUN {
                    match prober
                        .probe(
                            ProbeType::Liveness,
                            &spec,
                            &ProbeTarget {
                                host_ip: ip,
                                ..target(&[], &[])
                            },
                        )
                        .await
                    {
                        Outcome::Success(_) | Outcome::Warning(_) => ok += 1,
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
        let cpu1 = thread_cpu();
        (
            ok,
            failed,
            started.elapsed(),
            (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        )
    })
}

fn report(name: &str, (ok, failed, wall, (user, system)): Run) {
    let total = ok + failed;
    let cpu = user + system;
    println!(
        "{name}: {total} probes ({failed} failed) in {wall:.2?} wall, prober thread {user:.2?} user + {system:.2?} system => {:.0} probes/s, {:.0} probes per CPU-second",
        total as f64 / wall.as_secs_f64(),
        total as f64 / cpu.as_secs_f64().max(0.01),
    );
}

#[test]
#[ignore = "benchmark"]
fn bench_http_and_tcp_probes_on_one_thread() {
    let port = PortRef::Number(server().into());
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
