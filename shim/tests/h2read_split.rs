//! The passive HTTP/2 reader against recorded sessions: real tonic clients talking to a real
//! hyper server (the fake containerd) through a recording relay. Fed the recording split at
//! every single point, and at random sets of points, the reader reports the same calls as when
//! fed the chunks as they came.

#[path = "support/fake_upstream.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use podward_api::cri;
use podward_shim::fault::Faults;
use podward_shim::h2read::Side;
use podward_shim::metrics::Metrics;
use podward_shim::observe::{Conversation, Observer, Outcome, Raw, Recorder, SideReader};
use proptest::prelude::*;
use support::FakeUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// Chunks per connection, in the order they were copied.
type Log = Arc<Mutex<Vec<Vec<(Side, Bytes)>>>>;

/// A relay that records what it copies, chunk by chunk, in the order it copied them.
async fn recording_relay(listen: &std::path::Path, upstream: std::path::PathBuf, log: Log) {
    let listener = UnixListener::bind(listen).expect("bind");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let conn = {
                let mut l = log.lock();
                l.push(Vec::new());
                l.len() - 1
            };
            let up = UnixStream::connect(&upstream).await.expect("upstream");
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = up.into_split();
            let l1 = log.clone();
            tokio::spawn(async move {
                let mut b = vec![0u8; 64 << 10];
                while let Ok(n) = cr.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                    l1.lock()[conn].push((Side::Client, Bytes::copy_from_slice(&b[..n])));
                    if uw.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = uw.shutdown().await;
            });
            let l2 = log.clone();
            tokio::spawn(async move {
                let mut b = vec![0u8; 64 << 10];
                while let Ok(n) = ur.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                    l2.lock()[conn].push((Side::Server, Bytes::copy_from_slice(&b[..n])));
                    if cw.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// One connection's worth of calls: unary with metadata, watched calls, an unknown method, a
/// bidi stream. `header`: the length of one RunPodSandbox's extra metadata value (past 16 KiB
/// its header block needs CONTINUATION frames); `large`: another's body needs several DATA
/// frames.
fn record_session(large: bool, header: usize) -> Vec<(Side, Bytes)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let up = dir.path().join("containerd.sock");
        let _fake = FakeUpstream::start(&up).await;
        let log: Log = Arc::default();
        let listen = dir.path().join("rec.sock");
        recording_relay(&listen, up, log.clone()).await;
        let ch = podward_api::socket::connect(listen.clone())
            .await
            .expect("connect");
        let mut rt = cri::runtime_service_client::RuntimeServiceClient::new(ch.clone());
        for i in 0..3 {
            let mut req = tonic::Request::new(cri::VersionRequest {
                version: format!("v{i}"),
            });
            req.metadata_mut()
                .insert("x-echo", "hello".parse().expect("md"));
            rt.version(req).await.expect("version");
        }
        let mut big = support::run_request("big-headers");
        big.metadata_mut()
            .insert("x-big", "X".repeat(header).parse().expect("md"));
        big.set_timeout(Duration::from_secs(30));
        let ran = rt.run_pod_sandbox(big).await;
        if header <= 64 << 10 {
            ran.expect("run");
        } else {
            // The server refuses a header list that long (HTTP 431): the session goes on.
            assert!(ran.is_err());
        }
        let mut body = support::run_request("big-body");
        if let Some(c) = body.get_mut().config.as_mut() {
            let n = if large { 100_000 } else { 10 };
            c.annotations.insert("blob".into(), "a".repeat(n));
        }
        rt.run_pod_sandbox(body).await.expect("run");
        let _ = rt
            .list_containers(cri::ListContainersRequest::default())
            .await;
        let mut g = tonic::client::Grpc::new(ch);
        g.ready().await.expect("ready");
        let unknown = g
            .unary(
                tonic::Request::new(cri::VersionRequest::default()),
                http::uri::PathAndQuery::from_static("/runtime.v1.RuntimeService/DoesNotExist"),
                tonic_prost::ProstCodec::<cri::VersionRequest, cri::VersionResponse>::default(),
            )
            .await;
        assert!(unknown.is_err());
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        g.ready().await.expect("ready");
        let mut echo = g
            .streaming(
                tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
                http::uri::PathAndQuery::from_static("/test.Echo/Stream"),
                tonic_prost::ProstCodec::<cri::VersionRequest, cri::VersionRequest>::default(),
            )
            .await
            .expect("stream opens")
            .into_inner();
        for i in 0..3 {
            tx.send(cri::VersionRequest {
                version: format!("e{i}"),
            })
            .await
            .expect("send");
            echo.message().await.expect("echo");
        }
        drop(tx);
        while let Ok(Some(_)) = echo.message().await {}
        // Let the last bytes land in the log.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut log = log.lock().clone();
        assert_eq!(log.len(), 1, "every call on one connection");
        log.remove(0)
    })
}

/// What one observed call says, times left out.
fn key(raw: &Raw) -> String {
    match raw {
        Raw::Request { method, body, .. } => format!("req {method:?} {:?}", body.to_bytes()),
        Raw::Call {
            method,
            request,
            response,
            grpc_status,
            outcome,
            ..
        } => format!(
            "call {method:?} {grpc_status:?} {outcome:?} {} {}",
            request.len(),
            response.len()
        ),
    }
}

/// Feeds `chunks` (in order) to a fresh pair of readers; the calls they report, and the
/// request count the metrics saw.
fn observe(chunks: &[(Side, Bytes)]) -> (Vec<String>, u64) {
    thread_local! {
        // One registry for all runs (building one per run would dominate the test's time).
        static METRICS: Metrics = Metrics::unregistered();
    }
    let metrics = METRICS.with(Clone::clone);
    let before = total_requests(&metrics);
    let (observer, rx) = Observer::channel(metrics.clone());
    let recorder = Arc::new(Recorder::new(metrics.clone(), observer, || 0));
    let mut conv = Conversation::new(recorder);
    let mut client = SideReader::new(Side::Client, Faults::new());
    let mut server = SideReader::new(Side::Server, Faults::new());
    for (side, chunk) in chunks {
        let r = match side {
            Side::Client => &mut client,
            Side::Server => &mut server,
        };
        r.feed(&mut conv, chunk);
        r.settle(&mut conv, true);
    }
    assert!(conv.observing(), "the reader must follow a real session");
    let mut out = Vec::new();
    while let Ok(raw) = rx.try_recv() {
        out.push(key(&raw));
    }
    (out, total_requests(&metrics) - before)
}

fn total_requests(metrics: &Metrics) -> u64 {
    let n: f64 = prometheus::core::Collector::collect(&metrics.requests)
        .iter()
        .flat_map(|f| f.get_metric().iter().map(|m| m.get_counter().get_value()))
        .sum();
    n as u64
}

fn session() -> &'static Vec<(Side, Bytes)> {
    static S: std::sync::OnceLock<Vec<(Side, Bytes)>> = std::sync::OnceLock::new();
    S.get_or_init(|| record_session(false, 10))
}

fn big_session() -> &'static Vec<(Side, Bytes)> {
    static S: std::sync::OnceLock<Vec<(Side, Bytes)>> = std::sync::OnceLock::new();
    S.get_or_init(|| record_session(true, 40_000))
}

/// A session whose one header block is a megabyte long (as containerd's trailers quoting a long
/// exec command can be).
fn huge_header_session() -> &'static Vec<(Side, Bytes)> {
    static S: std::sync::OnceLock<Vec<(Side, Bytes)>> = std::sync::OnceLock::new();
    S.get_or_init(|| record_session(false, 1 << 20))
}

/// `chunks` with chunk `i` cut at `at`.
fn cut(chunks: &[(Side, Bytes)], i: usize, at: usize) -> Vec<(Side, Bytes)> {
    let mut v = chunks.to_vec();
    let (side, b) = v.remove(i);
    v.insert(i, (side, b.slice(at..)));
    v.insert(i, (side, b.slice(..at)));
    v
}

#[test]
fn the_recorded_sessions_are_what_they_should_be() {
    let (small, small_requests) = observe(session());
    let (calls, requests) = observe(big_session());
    assert_eq!(small.len(), calls.len(), "{small:#?} vs {calls:#?}");
    assert_eq!(small_requests, requests);
    // 3 Version + 2 RunPodSandbox + ListContainers + unknown + echo stream.
    assert_eq!(requests, 8, "{calls:#?}");
    let runs: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("call RunPodSandbox Some(0) Delivered"))
        .collect();
    assert_eq!(runs.len(), 2, "{calls:#?}");
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("call ListContainers Some(0) Delivered")),
        "{calls:#?}"
    );
    let _ = Outcome::Delivered;
}

#[test]
fn every_single_split_point_gives_the_same_calls() {
    let whole = session();
    let want = observe(whole);
    let mut points = 0;
    for (i, (_, b)) in whole.iter().enumerate() {
        for at in 1..b.len() {
            assert_eq!(observe(&cut(whole, i, at)), want, "chunk {i} cut at {at}");
            points += 1;
        }
    }
    assert!(
        points > 1000,
        "only {points} split points: the session is too small"
    );
    eprintln!("{points} split points");
}

#[test]
fn a_megabyte_header_block_is_followed_like_a_small_one() {
    // The same calls, the long one refused by the server (HTTP 431, no grpc-status).
    let (small, small_requests) = observe(session());
    let (huge, requests) = observe(huge_header_session());
    assert_eq!(requests, small_requests);
    let refused: Vec<&String> = huge.iter().filter(|c| !small.contains(c)).collect();
    assert_eq!(refused.len(), 1, "{huge:#?}");
    assert!(
        refused[0].starts_with("call RunPodSandbox None"),
        "{refused:?}"
    );
    let longest = huge_header_session()
        .iter()
        .map(|(_, b)| b.len())
        .sum::<usize>();
    assert!(longest > 1 << 20, "{longest}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_splits_give_the_same_calls(
        huge in any::<bool>(),
        seeds in proptest::collection::vec(any::<u32>(), 1..200),
    ) {
        let whole = if huge { huge_header_session() } else { big_session() };
        let want = observe(whole);
        // Each chunk split at up to a few points chosen from the seeds.
        let mut chunks = Vec::new();
        let mut seeds = seeds.into_iter().cycle();
        for (side, b) in whole {
            let mut cuts: Vec<usize> = (0..3)
                .filter_map(|_| seeds.next())
                .map(|s| s as usize % (b.len() + 1))
                .collect();
            cuts.sort_unstable();
            let mut from = 0;
            for c in cuts {
                chunks.push((*side, b.slice(from..c)));
                from = c;
            }
            chunks.push((*side, b.slice(from..)));
        }
        prop_assert_eq!(observe(&chunks), want);
    }
}
