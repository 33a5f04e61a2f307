//! Shared fixtures for the probe handler tests: a raw HTTP/1.1 server on 127.0.0.1 that records
//! every request head byte for byte, a fake [`ExecRunner`], and probe spec helpers.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};
use podward_prober::model::outcome::Outcome;
use podward_prober::model::outcome::ProbeResult;
use podward_prober::probing::probe::{Prober, ProberOptions};
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeSpec, ProbeType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// An HTTP GET handler on 127.0.0.1:`port` with `headers`.
pub fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Handler {
    Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: None,
        path: path.to_owned(),
        port: PortRef::Number(port.into()),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

/// Runs `handler` once as a liveness probe with a 1 s timeout against 127.0.0.1.
pub async fn run(handler: Handler) -> Outcome {
    prober()
        .probe(ProbeType::Liveness, &spec(handler, 1), &target(&[], &[]))
        .await
}

/// (result, output, warning) of an outcome; panics on an errored one.
pub fn result(v: &Outcome) -> (ProbeResult, &str, bool) {
    match v {
        Outcome::Success(output) => (ProbeResult::Success, output.as_str(), false),
        Outcome::Warning(output) => (ProbeResult::Success, output.as_str(), true),
        Outcome::Failure(output) => (ProbeResult::Failure, output.as_str(), false),
        Outcome::Errored(message) => panic!("unexpected errored outcome: {message}"),
    }
}

/// A probe spec with kubelet defaults and the given handler and timeout.
pub fn spec(handler: Handler, timeout_secs: u64) -> ProbeSpec {
    ProbeSpec {
        handler,
        initial_delay_seconds: 0,
        timeout: Duration::from_secs(timeout_secs),
        period: Duration::from_secs(10),
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
    }
}

pub fn target<'a>(
    ports: &'a [podward_prober::model::container_port::ContainerPort],
    env: &'a [(String, String)],
) -> ProbeTarget<'a> {
    ProbeTarget {
        host_ip: LOCALHOST,
        container_id: "c0ffee",
        ports,
        env,
    }
}

pub fn prober() -> Prober {
    Prober::new(
        ProberOptions {
            kube_version: "1.33".to_owned(),
        },
        Arc::new(FakeExec::new(Vec::new())),
    )
}

/// What the raw server answers.
#[derive(Clone)]
pub enum Reply {
    /// Write these bytes, then close.
    Raw(Vec<u8>),
    /// Wait, then write.
    After(Duration, Vec<u8>),
    /// Close without answering.
    Close,
}

/// A full HTTP/1.1 response with Content-Length.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    Reply::Raw(bytes)
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Request line, e.g. "GET /x HTTP/1.1".
    pub line: String,
    /// Header lines as sent (name case preserved), in order.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn path(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("")
    }

    pub fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

type Route = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// Raw HTTP server; dropped => stops accepting.
pub struct RawServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawServer {
    pub async fn start(route: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::on(listener, Arc::new(route))
    }

    pub fn on(listener: TcpListener, route: Route) -> Self {
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s, c) = (seen.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let (s, route) = (s.clone(), route.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 64 * 1024 {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).into_owned();
                    let mut lines = head.split("\r\n");
                    let line = lines.next().unwrap_or("").to_owned();
                    let headers = lines
                        .take_while(|l| !l.is_empty())
                        .filter_map(|l| {
                            l.split_once(": ")
                                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        })
                        .collect();
                    let req = Seen { line, headers };
                    let reply = route(&req);
                    s.lock().push(req);
                    let bytes = match reply {
                        Reply::Raw(b) => b,
                        Reply::After(d, b) => {
                            tokio::time::sleep(d).await;
                            b
                        }
                        Reply::Close => return,
                    };
                    let _ = sock.write_all(&bytes).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Self {
            addr,
            seen,
            connections,
            task,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

/// A scripted [`ExecRunner`]: answers pop from the front (the last one repeats), calls recorded.
pub struct FakeExec {
    answers: Mutex<Vec<Result<ExecOutput, ExecError>>>,
    pub calls: Mutex<Vec<(String, Vec<String>, Duration)>>,
}

impl FakeExec {
    pub fn new(answers: Vec<Result<ExecOutput, ExecError>>) -> Self {
        Self {
            answers: Mutex::new(answers),
            calls: Mutex::new(Vec::new()),
        }
    }
}

impl ExecRunner for FakeExec {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        self.calls
            .lock()
            .push((container_id.to_owned(), cmd, timeout));
        let mut answers = self.answers.lock();
        let answer = if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers.first().cloned().unwrap_or_else(|| {
                Err(ExecError::Runtime {
                    code: tonic::Code::Unknown,
                    message: "no answer scripted".to_owned(),
                })
            })
        };
        Box::pin(async move { answer })
    }
}

/// A listener whose accept queue is full, so that a further connect hangs (its SYNs dropped):
/// the socket, its address and the connections that filled the queue, all to be kept alive for
/// as long as the hang is wanted.
pub async fn unanswering_listener() -> (socket2::Socket, SocketAddr, Vec<tokio::net::TcpStream>) {
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("addr").into())
        .expect("bind");
    sock.listen(0).expect("listen");
    let addr = sock.local_addr().expect("addr").as_socket().expect("inet");
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(s);
        }
    }
    (sock, addr, fillers)
}
