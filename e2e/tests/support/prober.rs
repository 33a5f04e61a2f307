//! Shared fixtures of the prober's e2e tests (included with `#[path]` by the `prober_*.rs` that
//! run the daemons): a real containerd, the real shim and prober binaries, and a kubelet-like
//! driver talking CRI through the shim.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use podward_api::prober::v1 as api;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::test_util::eventually;
use podward_e2e::apiserver::{MockApiServer, pod_object};
use podward_e2e::{ContainerSpec, Daemon, Driver, Pod, PodSpec, TestNode, free_port};
use serde_json::{Value, json};
use tokio::time::Instant;

/// A node with containerd, shim and prober running.
pub(crate) struct Env {
    pub(crate) node: TestNode,
    pub(crate) shim: Daemon,
    pub(crate) prober: Daemon,
    pub(crate) driver: Driver,
    pub(crate) prober_socket: PathBuf,
    pub(crate) prober_admin: SocketAddr,
    /// Extra prober flags (kept for restarts).
    pub(crate) prober_args: Vec<String>,
}

fn s(p: &std::path::Path) -> String {
    p.to_str().expect("utf8 path").to_owned()
}

impl Env {
    pub(crate) async fn start() -> Env {
        Self::start_with(Vec::new()).await
    }

    /// A node whose prober also gets `prober_args`.
    pub(crate) async fn start_with(prober_args: Vec<String>) -> Env {
        let node = TestNode::start().await.expect("node");
        let dir = node.dir().to_owned();
        let (cri, ctl) = (dir.join("shim.cri.sock"), dir.join("shim.ctl.sock"));
        let shim_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let shim = Daemon::spawn(
            "podward-shim",
            &[
                "--listen",
                &s(&cri),
                "--control-socket",
                &s(&ctl),
                "--containerd-socket",
                &s(&node.containerd_socket()),
                "--admin-addr",
                &shim_admin.to_string(),
            ],
        )
        .await
        .expect("spawn shim");
        shim.wait_healthy(shim_admin, Duration::from_secs(60))
            .await
            .expect("shim healthy");
        let prober_socket = dir.join("prober.sock");
        let prober_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let prober = spawn_prober(&node, &prober_socket, prober_admin, &prober_args).await;
        let driver = Driver::connect(&cri).await.expect("driver via the shim");
        Env {
            node,
            shim,
            prober,
            driver,
            prober_socket,
            prober_admin,
            prober_args,
        }
    }

    /// kill -9 the prober and start a new one on the same socket.
    pub(crate) async fn restart_prober_hard(&mut self) {
        self.kill_prober().await;
        self.start_prober().await;
    }

    /// kill -9 the prober and wait for it to be gone; it stays down until
    /// [`Env::start_prober`].
    pub(crate) async fn kill_prober(&mut self) {
        self.prober.kill9();
        // Wait for the crash to complete (the kernel releases its sockets at exit).
        let prober = &self.prober;
        eventually("the killed prober to exit", Duration::from_secs(10), || {
            let gone = prober.exited().is_some();
            async move { gone }
        })
        .await;
    }

    /// Starts a new prober on the same socket (after [`Env::kill_prober`]) and waits until it
    /// is ready.
    pub(crate) async fn start_prober(&mut self) {
        // A fresh admin port anyway: another test may have been handed the old one.
        self.prober_admin = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        self.prober = spawn_prober(
            &self.node,
            &self.prober_socket,
            self.prober_admin,
            &self.prober_args,
        )
        .await;
        // Ready = the prober has its whole view again (what a client may rely on).
        self.prober
            .wait_ready(self.prober_admin, Duration::from_secs(60))
            .await
            .expect("restarted prober ready");
    }

    pub(crate) async fn client(&self) -> ProberClient<tonic::transport::Channel> {
        ProberClient::new(podward_api::socket::channel(&self.prober_socket))
    }

    /// The prober's view of one container, if it has one yet.
    pub(crate) async fn container(&self, uid: &str, name: &str) -> Option<api::ContainerStatus> {
        let st = self
            .client()
            .await
            .status(api::StatusRequest {
                pod_uid: uid.to_owned(),
            })
            .await
            .ok()?
            .into_inner();
        st.pods
            .into_iter()
            .flat_map(|p| p.containers)
            .find(|c| c.name == name)
    }

    /// Runs a one-container pod with `probes` (the container's entry of `podward.io/probes`).
    pub(crate) async fn run(&self, name: &str, script: &str, probes: serde_json::Value) -> Pod {
        self.run_spec(PodSpec::new(name), name, script, probes)
            .await
    }

    pub(crate) async fn run_spec(
        &self,
        spec: PodSpec,
        name: &str,
        script: &str,
        probes: serde_json::Value,
    ) -> Pod {
        let annotation = json!({ "app": probes }).to_string();
        let spec = spec
            .annotation(podward_api::labels::PODWARD_PROBES, &annotation)
            .container(ContainerSpec::new("app", &["sh", "-c", script]));
        self.driver
            .run_pod(&self.node, spec)
            .await
            .unwrap_or_else(|e| panic!("run pod {name}: {e}"))
    }
}

async fn spawn_prober(
    node: &TestNode,
    socket: &std::path::Path,
    admin: SocketAddr,
    extra: &[String],
) -> Daemon {
    let dir = node.dir();
    let mut args: Vec<String> = [
        "--socket",
        &s(socket),
        "--shim-socket",
        &s(&dir.join("shim.ctl.sock")),
        "--containerd-socket",
        &s(&node.containerd_socket()),
        "--node-ip",
        "127.0.0.1",
        "--admin-addr",
        &admin.to_string(),
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.extend(extra.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::spawn("podward-prober", &args)
        .await
        .expect("spawn prober");
    d.wait_healthy(admin, Duration::from_secs(60))
        .await
        .expect("prober healthy");
    d
}

/// A shell script that exits promptly on SIGTERM (like the upstream agnhost servers), runs
/// `body` and then sleeps.
pub(crate) fn script(body: &str) -> String {
    format!("trap 'exit 0' TERM; {body}; sleep 600 & wait")
}

/// busybox httpd on 127.0.0.1:`port` serving `/healthz` (deleted after `fail_after_s` seconds,
/// so it turns 404) and a CGI `/redirect?loc=<url>` answering 302 to `<url>`.
pub(crate) fn http_server(port: u16, fail_after_s: Option<u32>) -> String {
    // `;` before the background job, not `&&`: `a && b & c` backgrounds the whole chain, and
    // httpd then raced the mkdir of its own document root (a flake seen under load).
    let fail = fail_after_s
        .map(|s| format!("(sleep {s}; rm -f /www/healthz) &"))
        .unwrap_or_default();
    script(&format!(
        "mkdir -p /www/cgi-bin && echo ok > /www/healthz && echo ok > /www/index.html && \
         printf '#!/bin/sh\\nprintf \"HTTP/1.1 302 Found\\\\r\\\\nLocation: %%s\\\\r\\\\nContent-Length: 0\\\\r\\\\n\\\\r\\\\n\" \"${{QUERY_STRING#loc=}}\"\\n' > /www/cgi-bin/redirect && \
         chmod +x /www/cgi-bin/redirect; {fail} httpd -p 127.0.0.1:{port} -h /www"
    ))
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`: a scenario whose probe
/// must never fail checks that its server came up well before the probe's initial delay, so a
/// slow test server cannot pass for a prober bug.
pub(crate) async fn wait_listening(port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "test server on port {port} not listening after {timeout:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One scenario's future.
pub(crate) type Scenario<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;

/// Runs named scenarios concurrently; panics listing every one that failed.
pub(crate) async fn all(scenarios: Vec<(&'static str, Scenario<'_>)>) {
    let names: Vec<&str> = scenarios.iter().map(|(n, _)| *n).collect();
    let results = futures_join(scenarios.into_iter().map(|(_, f)| f).collect()).await;
    let failed: Vec<String> = names
        .iter()
        .zip(results)
        .filter_map(|(n, r)| r.err().map(|e| format!("{n}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "failed scenarios:\n{}",
        failed.join("\n")
    );
}

async fn futures_join<'a>(fs: Vec<Scenario<'a>>) -> Vec<Result<(), String>> {
    let mut fs: Vec<_> = fs.into_iter().map(Some).collect();
    let mut out: Vec<Option<Result<(), String>>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in fs.iter_mut().enumerate() {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(r) => {
                        out[i] = Some(r);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
}

/// Observes `pod` for `window`: the restart count never decreases and ends at `want`.
pub(crate) async fn restarts_stay(pod: &Pod, want: u32, window: Duration) -> Result<(), String> {
    let end = Instant::now() + window;
    while Instant::now() < end {
        if pod.restart_count("app") > want {
            return Err(format!("restarted: {:?}", pod.restart_counts_seen("app")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (pod.restart_count("app") == want)
        .then_some(())
        .ok_or_else(|| {
            format!(
                "restart counts {:?}, want {want}",
                pod.restart_counts_seen("app")
            )
        })
}

/// Waits for the first restart within `timeout` and checks the count went 0 -> 1 (never jumped
/// or went back), as upstream's RunLivenessTest does.
pub(crate) async fn restarts_once(pod: &Pod, timeout: Duration) -> Result<(), String> {
    pod.wait_restart_count("app", 1, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let seen = pod.restart_counts_seen("app");
    if pod.restart_count("app") != 1 {
        return Err(format!("more than one restart: {seen:?}"));
    }
    if seen.iter().any(|c| *c > 1) || seen.windows(2).any(|w| w[1] < w[0]) {
        return Err(format!("restart counts not 0 -> 1: {seen:?}"));
    }
    Ok(())
}

/// `GET /metrics` of a daemon's admin endpoint, as text.
pub(crate) async fn scrape(admin: SocketAddr) -> Result<String, String> {
    scrape_path(admin, "/metrics").await
}

/// `GET path` of a daemon's admin endpoint, as text (status line and headers included).
pub(crate) async fn scrape_path(admin: SocketAddr, path: &str) -> Result<String, String> {
    podward_e2e::http_get(admin, path, Duration::from_secs(10))
        .await
        .map_err(|e| format!("GET {path} from {admin}: {e}"))
}

/// The metric families a scrape declares (`# TYPE` lines), sorted.
pub(crate) fn families(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What `podward-prober status` printed: whether it succeeded, stdout, stderr.
pub(crate) struct StatusRun {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Env {
    /// Runs `podward-prober --socket <this prober's> status <args>`, the command an operator types.
    pub(crate) async fn status_cli(&self, args: &[&str]) -> Result<StatusRun, String> {
        let out = tokio::process::Command::new(podward_e2e::bin_path("podward-prober"))
            .arg("--socket")
            .arg(&self.prober_socket)
            .arg("status")
            .args(args)
            .output()
            .await
            .map_err(|e| format!("run podward-prober status: {e}"))?;
        Ok(StatusRun {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// The value of the first sample line of `text` that contains every one of `parts`.
pub(crate) fn sample(text: &str, parts: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A pod of `containers` sleeping containers `c0`, `c1`, …, each with `probes(i)` as its entry
/// in the probes annotation.
pub(crate) async fn run_pod(
    env: &Env,
    name: &str,
    containers: usize,
    probes: impl Fn(usize) -> serde_json::Value,
) -> Pod {
    let mut annotation = serde_json::Map::new();
    let mut spec = PodSpec::new(name);
    for i in 0..containers {
        let c = format!("c{i}");
        annotation.insert(c.clone(), probes(i));
        spec = spec.container(ContainerSpec::new(&c, &["sh", "-c", &script("true")]));
    }
    let spec = spec.annotation(
        podward_api::labels::PODWARD_PROBES,
        &serde_json::Value::Object(annotation).to_string(),
    );
    env.driver
        .run_pod(&env.node, spec)
        .await
        .unwrap_or_else(|e| panic!("run pod {name}: {e}"))
}

/// A healthy HTTP target on loopback that records when each request arrived: a canary pod's
/// probes aim at it, so the gaps between arrivals show whether anything delayed them.
pub(crate) struct Recorder {
    pub(crate) port: u16,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Recorder {
    /// Listens on a free loopback port, each connection on its own thread.
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let seen = arrivals.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                seen.lock().push(Instant::now());
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
        Self { port, arrivals }
    }

    /// The requests that arrived in `[from, to]`, in order.
    fn arrivals(&self, from: Instant, to: Instant) -> Vec<Instant> {
        self.arrivals
            .lock()
            .iter()
            .copied()
            .filter(|t| *t >= from && *t <= to)
            .collect()
    }

    /// Gaps between consecutive probes that arrived in `[from, to]`.
    pub(crate) fn gaps(&self, from: Instant, to: Instant) -> Vec<Duration> {
        self.arrivals(from, to)
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect()
    }

    /// The largest gap between consecutive probes that arrived in `[from, to]` (`MAX` with
    /// fewer than two), and how many arrived.
    pub(crate) fn largest_gap(&self, from: Instant, to: Instant) -> (Duration, usize) {
        let seen = self.arrivals(from, to);
        let gap = seen
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(Duration::MAX);
        (gap, seen.len())
    }
}

/// One canary pod per recorder, `canary-{i}`: a container `c0` whose 1 s HTTP liveness probe
/// aims at the recorder, with `failureThreshold: 1`, so one failed probe is a kill.
pub(crate) async fn run_canaries(env: &Env, recorders: &[Recorder]) -> Vec<Pod> {
    let mut canaries = Vec::new();
    for (i, r) in recorders.iter().enumerate() {
        let port = r.port;
        canaries.push(
            run_pod(env, &format!("canary-{i}"), 1, |_| {
                json!({"livenessProbe": {"httpGet": {"path": "/healthz", "port": port},
                    "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}})
            })
            .await,
        );
    }
    canaries
}

/// What went wrong with the canaries (from [`run_canaries`]) so far: a failed probe in the
/// prober's per-probe metrics, or a restart of `c0`.
pub(crate) async fn canary_problems(env: &Env, canaries: &[Pod]) -> Vec<String> {
    let mut problems = Vec::new();
    let probes_page = scrape_path(env.prober_admin, "/metrics/probes")
        .await
        .expect("scrape");
    for (i, pod) in canaries.iter().enumerate() {
        let name = format!("pod=\"canary-{i}\"");
        let failed = sample(
            &probes_page,
            &["prober_probe_total{", &name, "result=\"failed\""],
        );
        if failed.unwrap_or(0.0) > 0.0 {
            problems.push(format!("canary {i}: {failed:?} failed probes"));
        }
        if pod.restart_count("c0") != 0 {
            problems.push(format!(
                "canary {i} was killed: {:?}",
                pod.restart_counts_seen("c0")
            ));
        }
    }
    problems
}

/// The node the prober runs as, in the API stand-in.
pub(crate) const NODE: &str = "e2e-node";
/// The readiness gate's condition type.
pub(crate) const GATE: &str = "podward.io/ready";
/// The namespace of the node lease (and of the sentinel's own lease).
pub(crate) const NAMESPACE: &str = "podward";

/// The API stand-in, and a node whose prober (as [`NODE`]) uses it through a kubeconfig in the
/// returned directory.
pub(crate) async fn start_with_api() -> (MockApiServer, Env, tempfile::TempDir) {
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    let env = Env::start_with(vec![
        "--node-name".into(),
        NODE.into(),
        "--kubeconfig".into(),
        kubeconfig.to_str().expect("utf8").into(),
    ])
    .await;
    (mock, env, dir)
}

/// Polls `cond` every 100 ms until it holds; an error naming `what` once `timeout` passes.
pub(crate) async fn until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let end = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= end {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// [`until`], panicking with its error.
pub(crate) async fn wait_until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    if let Err(e) = until(what, timeout, cond).await {
        panic!("{e}");
    }
}

/// The gate condition on pod `uid` in the stand-in (`Null` when absent).
pub(crate) fn gate(mock: &MockApiServer, uid: &str) -> Value {
    mock.pod(uid)
        .and_then(|p| {
            p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == GATE)
                .cloned()
        })
        .unwrap_or(Value::Null)
}

/// The status of the gate condition on pod `uid` in the stand-in ("" when absent).
pub(crate) fn gate_status(mock: &MockApiServer, uid: &str) -> String {
    gate(mock, uid)["status"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default()
}

/// The stand-in's Node for this node (the lease's owner; the sentinel ignores the lease of a
/// Node that is gone).
pub(crate) fn put_node(mock: &MockApiServer) {
    mock.put_node(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
}

/// The prober's flags for the lease tests: its node, the stand-in, the node lease renewed every
/// 1 s with a 4 s duration.
pub(crate) fn lease_prober_args(kubeconfig: &std::path::Path) -> Vec<String> {
    [
        "--node-name",
        NODE,
        "--kubeconfig",
        kubeconfig.to_str().expect("utf8"),
        "--lease-namespace",
        NAMESPACE,
        "--node-lease-renew-interval-seconds",
        "1",
        "--node-lease-duration-seconds",
        "4",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect()
}

/// Runs gated pod `name` whose HTTP readiness succeeds, put in the stand-in with the gate
/// condition `initial` (absent when `None`); its UID.
pub(crate) async fn ready_pod(
    env: &Env,
    mock: &MockApiServer,
    name: &str,
    initial: Option<&str>,
) -> String {
    let data = env.node.dir().join(format!("data-{name}"));
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("healthz"), "ok").expect("healthz");
    let port = free_port();
    let probes = json!({"readinessProbe": {"httpGet": {"path": "/healthz", "port": port},
        "periodSeconds": 1, "failureThreshold": 3, "timeoutSeconds": 1}});
    let spec = PodSpec::new(name)
        .annotation(
            podward_api::labels::PODWARD_PROBES,
            &json!({ "app": probes }).to_string(),
        )
        .container(
            ContainerSpec::new(
                "app",
                &[
                    "sh",
                    "-c",
                    &script(&format!("httpd -p 127.0.0.1:{port} -h /data")),
                ],
            )
            .mount(data.to_str().expect("utf8"), "/data"),
        );
    let mut obj = pod_object(&spec, NODE);
    obj["spec"]["readinessGates"] = json!([{ "conditionType": GATE }]);
    if let Some(st) = initial {
        obj["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({"type": GATE, "status": st, "reason": "Earlier",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}));
    }
    mock.put_pod(obj);
    let pod = env.driver.run_pod(&env.node, spec).await.expect("run pod");
    pod.uid().to_owned()
}

/// A `podward-prober sentinel` on the stand-in (`sentinel-e2e`, period 1 s), healthy; with its
/// admin address.
pub(crate) async fn spawn_sentinel(kubeconfig: &std::path::Path) -> (Daemon, SocketAddr) {
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let args = [
        "sentinel",
        "--kubeconfig",
        kubeconfig.to_str().expect("utf8"),
        "--namespace",
        NAMESPACE,
        "--identity",
        "sentinel-e2e",
        "--period-seconds",
        "1",
        "--admin-addr",
        &admin.to_string(),
    ];
    let d = Daemon::spawn("podward-prober", &args)
        .await
        .expect("spawn the sentinel");
    d.wait_healthy(admin, Duration::from_secs(30))
        .await
        .expect("sentinel healthy");
    (d, admin)
}

/// Waits until the sentinel's metrics say it leads and follows exactly one lease.
pub(crate) async fn until_async_leases(admin: SocketAddr) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape(admin).await.unwrap_or_default();
        if sample(&m, &["podward_sentinel_leases "]) == Some(1.0)
            && sample(&m, &["podward_sentinel_leader "]) == Some(1.0)
        {
            return;
        }
        assert!(
            Instant::now() < end,
            "the sentinel never led with one lease: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
