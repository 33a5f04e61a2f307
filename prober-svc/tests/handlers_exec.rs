//! Exec probe acceptance items E1–E5: the prober over a scripted [`ExecRunner`] (the seam), and
//! `CriExec` against a real HTTP/2 gRPC server speaking CRI `ExecSync`.

#[path = "support/handlers.rs"]
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use podward_api::cri::{ExecSyncRequest, ExecSyncResponse};
use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::handler::exec::cri::CriExec;
use podward_prober::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};
use podward_prober::handler::expand::expand;
use podward_prober::model::outcome::Outcome;
use podward_prober::model::outcome::ProbeResult;
use podward_prober::probing::probe::{Prober, ProberOptions};
use podward_prober::spec::{Handler, ProbeType};
use prost::Message;
use support::{FakeExec, LOCALHOST, spec};
use tokio::net::TcpListener;

fn out(stdout: &[u8], stderr: &[u8], exit_code: i32) -> Result<ExecOutput, ExecError> {
    Ok(ExecOutput {
        stdout: stdout.to_vec(),
        stderr: stderr.to_vec(),
        exit_code,
    })
}

async fn run_with(
    answers: Vec<Result<ExecOutput, ExecError>>,
    cmd: &[&str],
    env: &[(String, String)],
    timeout: u64,
) -> (Outcome, Vec<(String, Vec<String>, Duration)>) {
    let fake = Arc::new(FakeExec::new(answers));
    let prober = Prober::new(ProberOptions::default(), fake.clone());
    let handler = Handler::Exec {
        command: cmd.iter().map(|s| (*s).to_owned()).collect(),
    };
    let target = ProbeTarget {
        host_ip: LOCALHOST,
        container_id: "ctr-1",
        ports: &[],
        env,
    };
    let v = prober
        .probe(ProbeType::Liveness, &spec(handler, timeout), &target)
        .await;
    let calls = fake.calls.lock().clone();
    (v, calls)
}

fn verdict(result: ProbeResult, output: &str) -> Outcome {
    match result {
        ProbeResult::Success => Outcome::Success(output.to_owned()),
        _ => Outcome::Failure(output.to_owned()),
    }
}

#[tokio::test]
async fn e1_exit_codes_map_and_output_is_stdout_then_stderr() {
    let (v, calls) = run_with(
        vec![out(b"out;", b"err", 0)],
        &["cat", "/tmp/health"],
        &[],
        1,
    )
    .await;
    assert_eq!(v, verdict(ProbeResult::Success, "out;err"));
    assert_eq!(
        calls,
        vec![(
            "ctr-1".to_owned(),
            vec!["cat".to_owned(), "/tmp/health".to_owned()],
            Duration::from_secs(1)
        )]
    );
    let (v, _) = run_with(
        vec![out(
            b"",
            b"cat: can't open '/tmp/health': No such file or directory\n",
            1,
        )],
        &["cat"],
        &[],
        1,
    )
    .await;
    assert_eq!(
        v,
        verdict(
            ProbeResult::Failure,
            "cat: can't open '/tmp/health': No such file or directory\n"
        )
    );
    let (v, _) = run_with(vec![out(b"", b"", 137)], &["x"], &[], 1).await;
    assert_eq!(v, verdict(ProbeResult::Failure, ""));
}

#[tokio::test]
async fn e1_output_capped_at_10240_bytes() {
    let (v, _) = run_with(vec![out(&[b'o'; 11 * 1024], b"", 0)], &["x"], &[], 1).await;
    let (Outcome::Success(output) | Outcome::Warning(output) | Outcome::Failure(output)) = v else {
        panic!("{v:?}")
    };
    assert_eq!(output.len(), 10240);
    let (v, _) = run_with(
        vec![out(&[b'o'; 8 * 1024], &[b'e'; 4 * 1024], 1)],
        &["x"],
        &[],
        1,
    )
    .await;
    let (Outcome::Success(output) | Outcome::Warning(output) | Outcome::Failure(output)) = v else {
        panic!("{v:?}")
    };
    assert_eq!(output.len(), 10240);
    assert!(output.starts_with(&"o".repeat(8192)) && output.ends_with(&"e".repeat(2048)));
}

#[tokio::test]
async fn e2_timeout_is_a_failure_with_the_timeout_text() {
    let text = r#"command timed out: "sh -c sleep 10" timed out after 1s"#;
    let timeout = ExecError::Timeout {
        command: "sh -c sleep 10".to_owned(),
        timeout: Duration::from_secs(1),
    };
    let (v, calls) = run_with(vec![Err(timeout)], &["sh", "-c", "sleep 10"], &[], 1).await;
    assert_eq!(v, verdict(ProbeResult::Failure, text));
    assert_eq!(calls.len(), 1, "a timeout is a result, not retried");
}

#[tokio::test]
async fn e3_other_errors_are_retried_three_times_then_errored() {
    let err = || {
        Err(ExecError::Runtime {
            code: tonic::Code::Unknown,
            message: "container is stopping".to_owned(),
        })
    };
    let (v, calls) = run_with(vec![err()], &["x"], &[], 1).await;
    assert_eq!(
        v,
        Outcome::Errored("rpc error: code = Unknown desc = container is stopping".to_owned())
    );
    assert_eq!(calls.len(), 3);
    let (v, calls) = run_with(vec![err(), err(), out(b"fine", b"", 0)], &["x"], &[], 1).await;
    assert_eq!(v, verdict(ProbeResult::Success, "fine"));
    assert_eq!(calls.len(), 3);
}

#[tokio::test]
async fn e5_command_is_expanded_from_the_static_env() {
    let env = [
        ("A".to_owned(), "alpha".to_owned()),
        ("B".to_owned(), "x".to_owned()),
        ("B".to_owned(), "beta".to_owned()),
    ];
    let (_, calls) = run_with(
        vec![out(b"", b"", 0)],
        &["echo", "$(A)-$(B)", "$$(A)", "$(NOPE)", "$A"],
        &env,
        1,
    )
    .await;
    assert_eq!(calls[0].1, ["echo", "alpha-beta", "$(A)", "$(NOPE)", "$A"]);
}

#[test]
fn e5_expansion_follows_kubelets_rules() {
    let env = |name: &[u8]| match name {
        b"VAR" => Some("value"),
        b"EMPTY" => Some(""),
        _ => None,
    };
    let cases = [
        ("$(VAR)", "value"),
        ("pre-$(VAR)-post", "pre-value-post"),
        ("$(VAR)$(VAR)", "valuevalue"),
        ("$$(VAR)", "$(VAR)"),
        ("$$$(VAR)", "$value"),
        ("$$$$(VAR)", "$$(VAR)"),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$(EMPTY)x", "x"),
        ("$(VAR", "$(VAR"),
        ("$(", "$("),
        ("$", "$"),
        ("x$", "x$"),
        ("$VAR", "$VAR"),
        ("$()", "$()"),
        ("no vars", "no vars"),
        ("$(VAR)$", "value$"),
    ];
    for (input, want) in cases {
        assert_eq!(expand(input, env), want, "input {input:?}");
    }
}

// --- E4: CriExec over a real gRPC (HTTP/2) server ---

type Seen = Arc<Mutex<Vec<(ExecSyncRequest, Option<String>)>>>;

/// Serves `/runtime.v1.RuntimeService/ExecSync` on 127.0.0.1: records the request and its
/// `grpc-timeout`, answers with `reply` (a response, or a gRPC status code).
async fn fake_cri(
    reply: Result<ExecSyncResponse, i32>,
) -> (SocketAddr, Seen, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (seen, reply) = (seen2.clone(), reply.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (seen, reply) = (seen.clone(), reply.clone());
                        async move {
                            assert_eq!(req.uri().path(), "/runtime.v1.RuntimeService/ExecSync");
                            let timeout = req
                                .headers()
                                .get("grpc-timeout")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let body = req.into_body().collect().await.expect("body").to_bytes();
                            let msg = ExecSyncRequest::decode(&body[5..]).expect("decode");
                            seen.lock().push((msg, timeout));
                            let mut trailers = http::HeaderMap::new();
                            let frames: Vec<Result<Frame<Bytes>, Infallible>> = match reply {
                                Ok(resp) => {
                                    let enc = resp.encode_to_vec();
                                    let mut buf = BytesMut::new();
                                    buf.put_u8(0);
                                    buf.put_u32(u32::try_from(enc.len()).expect("len"));
                                    buf.put_slice(&enc);
                                    trailers
                                        .insert("grpc-status", http::HeaderValue::from_static("0"));
                                    vec![
                                        Ok(Frame::data(buf.freeze())),
                                        Ok(Frame::trailers(trailers)),
                                    ]
                                }
                                Err(code) => {
                                    trailers.insert(
                                        "grpc-status",
                                        code.to_string().parse().expect("code"),
                                    );
                                    trailers.insert(
                                        "grpc-message",
                                        http::HeaderValue::from_static("scripted"),
                                    );
                                    vec![Ok(Frame::trailers(trailers))]
                                }
                            };
                            let resp = http::Response::builder()
                                .header("content-type", "application/grpc")
                                .body(StreamBody::new(futures::stream::iter(frames)))
                                .expect("response");
                            Ok::<_, Infallible>(resp)
                        }
                    });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    (addr, seen, task)
}

async fn cri(addr: SocketAddr) -> CriExec {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    CriExec::new(channel)
}

#[tokio::test]
async fn e4_cri_exec_sends_timeout_seconds_and_runtime_deadline() {
    let resp = ExecSyncResponse {
        stdout: b"hi".to_vec(),
        stderr: b"!".to_vec(),
        exit_code: 3,
    };
    let (addr, seen, task) = fake_cri(Ok(resp)).await;
    let exec = cri(addr).await;
    let got = exec
        .exec_sync(
            "ctr-9",
            vec!["cat".into(), "/tmp/x".into()],
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(
        got,
        Ok(ExecOutput {
            stdout: b"hi".to_vec(),
            stderr: b"!".to_vec(),
            exit_code: 3
        })
    );
    let (req, grpc_timeout) = seen.lock()[0].clone();
    assert_eq!(
        (req.container_id.as_str(), req.cmd.clone(), req.timeout),
        ("ctr-9", vec!["cat".to_owned(), "/tmp/x".to_owned()], 5)
    );
    // 2 min runtime request timeout + 5 s probe timeout, as a gRPC deadline.
    let t = grpc_timeout.expect("grpc-timeout header");
    let micros: u64 = match t.split_at(t.len() - 1) {
        (n, "u") => n.parse().expect("n"),
        (n, "m") => n.parse::<u64>().expect("n") * 1000,
        (n, "S") => n.parse::<u64>().expect("n") * 1_000_000,
        other => panic!("unexpected grpc-timeout {other:?}"),
    };
    assert!(
        (124_000_000..=125_000_000).contains(&micros),
        "grpc-timeout {t}"
    );
    task.abort();
}

#[tokio::test]
async fn e4_deadline_exceeded_is_a_timeout_and_other_codes_are_errors() {
    let (addr, _seen, task) = fake_cri(Err(4)).await;
    let got = cri(addr)
        .await
        .exec_sync(
            "c",
            vec!["sh".into(), "-c".into(), "sleep 10".into()],
            Duration::from_secs(1),
        )
        .await;
    let err = got.expect_err("a timeout");
    assert_eq!(
        err,
        ExecError::Timeout {
            command: "sh -c sleep 10".to_owned(),
            timeout: Duration::from_secs(1),
        }
    );
    assert_eq!(
        err.to_string(),
        r#"command timed out: "sh -c sleep 10" timed out after 1s"#
    );
    task.abort();
    let (addr, _seen, task) = fake_cri(Err(14)).await;
    let got = cri(addr)
        .await
        .exec_sync("c", vec!["true".into()], Duration::from_secs(1))
        .await;
    let err = got.expect_err("an error");
    assert_eq!(
        err,
        ExecError::Runtime {
            code: tonic::Code::Unavailable,
            message: "scripted".to_owned(),
        }
    );
    assert_eq!(
        err.to_string(),
        "rpc error: code = Unavailable desc = scripted"
    );
    task.abort();
}
