//! The release prober under the chart's memory limit against hostile targets (`harness = false`).
//!
//! `PODWARD_BIN_DIR=$PWD/target/release cargo bench -p podward-e2e --bench prober_hostile --
//! [--hostile-pods N] [--probes-per-pod N] [--canaries N] [--window S] [--memory-limit BYTES]`
//!
//! The prober binary runs as a process of its own in a memory cgroup (v2 `memory.max`, else v1
//! `memory.limit_in_bytes`) set to the chart's limit, so it sizes its target memory budget the way
//! it does on a node. A child process (this binary re-executed) serves a fake shim whose snapshot
//! holds `--hostile-pods` pods of `--probes-per-pod` containers, each with a 1 s readiness probe
//! against a target that answers every request with a 10 MB head (a ~9.9 MB status line and a
//! `Location` field: Go's limits allow it), and `--canaries` pods with a 1 s HTTP liveness probe
//! (`failureThreshold: 1`) against healthy targets in this process that record when each probe
//! arrives. `PODWARD_BENCH_PROBER_LOG=<file>` keeps the prober's log. After the window the hostile targets stop answering and, 20 s later, the prober's
//! memory is read again.
//!
//! Prints: the canaries' probe gaps (lateness over the period: p50, p99, max), their failed
//! probes, the prober's RSS (before, peak, 20 s after) and its cgroup's OOM kills, the budget's
//! peak from `podward_prober_target_memory_bytes`, the hostile heads sent, and the prober's CPU.

#[allow(dead_code)]
#[path = "prober_scale/lifecycle.rs"]
mod lifecycle;
#[allow(dead_code)]
#[path = "prober_scale/servers.rs"]
mod servers;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use podward_api::shim::v1 as shim;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ROLE: &str = "PODWARD_BENCH_ROLE";
const SHIM_SOCKET: &str = "PODWARD_BENCH_SHIM_SOCKET";
const CANARY_PORTS: &str = "PODWARD_BENCH_CANARY_PORTS";
const PERIOD: Duration = Duration::from_secs(1);
/// The chart's memory limit for the prober (charts/podward/values.yaml).
const CHART_LIMIT: u64 = 512 << 20;

const USAGE: &str = "\
prober hostile-target benchmark: the release prober under its memory limit, hostile 10 MB heads
and on-time canaries

PODWARD_BIN_DIR=$PWD/target/release cargo bench -p podward-e2e --bench prober_hostile -- [FLAGS]

  --hostile-pods N     hostile pods (default 20)
  --probes-per-pod N   containers per hostile pod, one readiness probe each (default 64)
  --canaries N         canary pods, one HTTP liveness probe each (default 4)
  --window S           seconds of attack measured (default 60)
  --memory-limit B     the prober's cgroup memory limit in bytes (default 536870912, the chart's)
  --help               this text
";

#[derive(Clone, Copy)]
struct Opts {
    hostile_pods: usize,
    probes_per_pod: usize,
    canaries: usize,
    window: u64,
    memory_limit: u64,
}

fn opts() -> Opts {
    let mut o = Opts {
        hostile_pods: 20,
        probes_per_pod: 64,
        canaries: 4,
        window: 60,
        memory_limit: CHART_LIMIT,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--hostile-pods" => o.hostile_pods = v.parse().unwrap_or(o.hostile_pods),
            "--probes-per-pod" => o.probes_per_pod = v.parse().unwrap_or(o.probes_per_pod),
            "--canaries" => o.canaries = v.parse().unwrap_or(o.canaries),
            "--window" => o.window = v.parse().unwrap_or(o.window),
            "--memory-limit" => o.memory_limit = v.parse().unwrap_or(o.memory_limit),
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let o = opts();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::var(ROLE).as_deref() == Ok("server") {
        return rt.block_on(serve_child(o));
    }
    rt.block_on(run(o))
}

// ---- the child: hostile targets and the fake shim ----

/// A 10 MB head: a ~9.9 MB status line, a `Location` field, no body.
fn huge_head() -> Vec<u8> {
    let mut head = b"HTTP/1.1 200 ".to_vec();
    head.resize(9_900_000, b'a');
    head.extend_from_slice(b"\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n");
    head
}

fn head_len() -> usize {
    huge_head().len()
}

/// A pod IP per hostile pod (127.0.1.x), so a pod's probes name only the port.
fn hostile_ip(i: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

async fn serve_child(o: Opts) -> Result<(), BoxError> {
    let sock = PathBuf::from(std::env::var(SHIM_SOCKET)?);
    let canary_ports: Vec<u16> = std::env::var(CANARY_PORTS)?
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    let head = bytes::Bytes::from(huge_head());
    let sent = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut hostile = Vec::new();
    for i in 0..o.hostile_pods {
        let l = TcpListener::bind((hostile_ip(i), 0)).await?;
        hostile.push(l.local_addr()?);
        tokio::spawn(huge_heads(l, head.clone(), sent.clone(), stop.clone()));
    }
    let now = podward_api::time::now_ns();
    let snap = snapshot(&o, &hostile, &canary_ports, now);
    lifecycle::serve(&sock, snap)
        .await
        .map_err(|e| e.to_string())?;
    println!("ready");
    // The parent's word on stdin stops the hostile targets (and cuts their connections); the
    // bytes of heads sent are reported every second until killed.
    let stdin = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    });
    tokio::spawn(async move {
        let _ = stdin.await;
        let _ = stop_tx.send(true);
        // Kept until the process ends, so the targets' receivers never see it dropped.
        std::future::pending::<()>().await;
    });
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!("sent {}", sent.load(Ordering::Relaxed));
        std::io::stdout().flush()?;
    }
}

/// Answers each request with `head` (counting the bytes written into `sent`), until `stop`.
async fn huge_heads(
    l: TcpListener,
    head: bytes::Bytes,
    sent: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = l.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((mut s, _)) = accepted else { continue };
        let head = head.clone();
        let sent = sent.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            let mut seen = 0;
            while seen < buf.len() {
                match s.read(&mut buf[seen..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen += n,
                }
                if buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let mut rest = &head[..];
            while !rest.is_empty() {
                let n = tokio::select! {
                    n = s.write(rest) => n,
                    _ = stop.wait_for(|s| *s) => return,
                };
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        sent.fetch_add(n as u64, Ordering::Relaxed);
                        rest = &rest[n..];
                    }
                }
            }
        });
    }
}

fn pod(uid: &str, name: &str, ip: &str, now: i64, probes: String) -> shim::Sandbox {
    let mut annotations = HashMap::new();
    annotations.insert(podward_api::labels::PODWARD_PROBES.to_owned(), probes);
    shim::Sandbox {
        id: format!("sb-{uid}"),
        name: name.to_owned(),
        namespace: "bench".into(),
        uid: uid.to_owned(),
        state: shim::SandboxState::Ready as i32,
        annotations,
        pod_ip: ip.to_owned(),
        created_at_ns: now,
        ..Default::default()
    }
}

fn container(uid: &str, name: &str, now: i64) -> shim::Container {
    shim::Container {
        id: format!("ctr-{uid}-{name}"),
        sandbox_id: format!("sb-{uid}"),
        pod_uid: uid.to_owned(),
        name: name.to_owned(),
        state: shim::ContainerState::Running as i32,
        created_at_ns: now,
        started_at_ns: now,
        ..Default::default()
    }
}

fn snapshot(o: &Opts, hostile: &[SocketAddr], canary_ports: &[u16], now: i64) -> shim::Snapshot {
    let mut snap = shim::Snapshot {
        seq: 1,
        instance_id: "bench".into(),
        runtime_connected: true,
        complete: true,
        ..Default::default()
    };
    for (i, addr) in hostile.iter().enumerate() {
        let uid = format!("hostile-{i}");
        let probes: Vec<String> = (0..o.probes_per_pod)
            .map(|c| {
                format!(
                    r#""c{c}":{{"readinessProbe":{{"httpGet":{{"path":"/","port":{}}},"periodSeconds":1,"timeoutSeconds":1}}}}"#,
                    addr.port()
                )
            })
            .collect();
        snap.sandboxes.push(pod(
            &uid,
            &uid,
            &addr.ip().to_string(),
            now,
            format!("{{{}}}", probes.join(",")),
        ));
        for c in 0..o.probes_per_pod {
            snap.containers.push(container(&uid, &format!("c{c}"), now));
        }
    }
    for (i, port) in canary_ports.iter().enumerate() {
        let uid = format!("canary-{i}");
        let probes = format!(
            r#"{{"app":{{"livenessProbe":{{"httpGet":{{"path":"/healthz","port":{port}}},"periodSeconds":1,"timeoutSeconds":1,"failureThreshold":1}}}}}}"#
        );
        snap.sandboxes
            .push(pod(&uid, &uid, "127.0.0.1", now, probes));
        snap.containers.push(container(&uid, "app", now));
    }
    snap
}

// ---- the parent: canary targets, the prober in its cgroup, the figures ----

/// A healthy target that records when each probe arrives.
#[derive(Clone, Default)]
struct Recorder {
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Recorder {
    async fn start() -> Result<(Self, u16), BoxError> {
        let l = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = l.local_addr()?.port();
        let r = Self::default();
        let arrivals = r.arrivals.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    continue;
                };
                arrivals.lock().push(Instant::now());
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        Ok((r, port))
    }

    /// Gaps between consecutive arrivals within `[from, to]`.
    fn gaps(&self, from: Instant, to: Instant) -> Vec<Duration> {
        let a = self.arrivals.lock();
        let inside: Vec<Instant> = a
            .iter()
            .copied()
            .filter(|t| *t >= from && *t <= to)
            .collect();
        inside.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A memory cgroup of its own for the prober, removed on drop (after the prober is gone).
struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    fn create(limit: u64) -> Result<Self, BoxError> {
        let name = format!("podward-bench-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let dir = if v2 {
            PathBuf::from("/sys/fs/cgroup").join(name)
        } else {
            PathBuf::from("/sys/fs/cgroup/memory").join(name)
        };
        std::fs::create_dir_all(&dir)?;
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(dir.join(file), limit.to_string())?;
        Ok(Self { dir, v2 })
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// OOM kills in the cgroup so far.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn proc_status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// utime+stime of `pid`, seconds (USER_HZ is 100 on Linux).
fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The first sample of `metric` whose line contains every one of `parts`.
fn sample(text: &str, parts: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The cumulative buckets of histogram `name` (`le` → count, in the order exported).
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` of what `after` counted since `before`.
fn bucket_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> f64 {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before.iter().find(|(l, _)| l == le).map_or(0.0, |b| b.1);
            (*le, n - was)
        })
        .collect();
    let total = delta.last().map_or(0.0, |d| d.1);
    delta
        .iter()
        .find(|(_, n)| *n >= total * q)
        .map_or(f64::NAN, |d| d.0)
}

async fn scrape(admin: SocketAddr, path: &str) -> String {
    podward_e2e::http_get(admin, path, Duration::from_secs(10))
        .await
        .unwrap_or_default()
}

async fn run(o: Opts) -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let shim_sock = dir.path().join("shim.sock");
    let mut recorders = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..o.canaries {
        let (r, port) = Recorder::start().await?;
        recorders.push(r);
        ports.push(port.to_string());
    }
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(std::env::args().skip(1))
        .env(ROLE, "server")
        .env(SHIM_SOCKET, &shim_sock)
        .env(CANARY_PORTS, ports.join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut child_in = child.stdin.take().ok_or("child stdin")?;
    let child_out = child.stdout.take().ok_or("child stdout")?;
    let sent = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    {
        let sent = sent.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut ready = Some(ready_tx);
            let mut lines = tokio::io::BufReader::new(child_out).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if l == "ready" {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                } else if let Some(n) = l.strip_prefix("sent ") {
                    sent.store(n.parse().unwrap_or(0), Ordering::Relaxed);
                }
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(60), ready_rx).await??;

    let cgroup = MemoryCgroup::create(o.memory_limit)?;
    let admin: SocketAddr = format!("127.0.0.1:{}", podward_e2e::free_port()).parse()?;
    let bin = podward_e2e::bin_path("podward-prober");
    // The prober enters its cgroup before it execs, so it reads its limit from the start.
    let script = format!(
        "echo $$ > {} && exec \"$0\" \"$@\"",
        cgroup.procs().display()
    );
    let mut prober = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&bin)
        .args([
            "--socket",
            &dir.path().join("prober.sock").display().to_string(),
        ])
        .args(["--shim-socket", &shim_sock.display().to_string()])
        .args([
            "--containerd-socket",
            &dir.path().join("no-containerd.sock").display().to_string(),
        ])
        .args(["--node-ip", "127.0.0.1", "--admin-addr", &admin.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(match std::env::var_os("PODWARD_BENCH_PROBER_LOG") {
            Some(path) => Stdio::from(std::fs::File::create(path)?),
            None => Stdio::null(),
        })
        .kill_on_drop(true)
        .spawn()?;
    let pid = prober.id().ok_or("prober pid")?;
    let want = o.hostile_pods * o.probes_per_pod + o.canaries;
    let started = Instant::now();
    loop {
        let page = scrape(admin, "/metrics").await;
        let workers: f64 = page
            .lines()
            .filter(|l| l.starts_with("podward_prober_workers{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if workers as usize >= want {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("only {workers} of {want} workers after 60 s").into());
        }
        if let Ok(Some(status)) = prober.try_wait() {
            return Err(format!("the prober exited: {status}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The prober's default budget: a quarter of its cgroup's limit, at least 32 MiB.
    let budget = (o.memory_limit / 4).max(32 << 20);
    // Past the workers' start-up jitter (one period).
    tokio::time::sleep(PERIOD * 3).await;
    let rss_start = proc_status_kib(pid, "VmRSS:");
    let sent0 = sent.load(Ordering::Relaxed);
    let cpu0 = proc_cpu_seconds(pid);
    let page0 = scrape(admin, "/metrics").await;
    let lateness0 = buckets(&page0, "podward_prober_schedule_lateness_seconds");
    let from = Instant::now();
    let (mut rss_peak, mut budget_peak) = (0, 0.0_f64);
    while from.elapsed() < Duration::from_secs(o.window) {
        rss_peak = rss_peak.max(proc_status_kib(pid, "VmRSS:"));
        let held = sample(
            &scrape(admin, "/metrics").await,
            &["podward_prober_target_memory_bytes "],
        );
        budget_peak = budget_peak.max(held.unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let to = Instant::now();
    let wall = (to - from).as_secs_f64();
    let cpu = proc_cpu_seconds(pid) - cpu0;
    // What the targets sent, in heads' worth of bytes (most heads are cut by the probe's timeout
    // or the budget before their end).
    let heads = (sent.load(Ordering::Relaxed) - sent0) as f64 / head_len() as f64;
    let alive = prober.try_wait()?.is_none();
    let probes_page = scrape(admin, "/metrics/probes").await;
    let page1 = scrape(admin, "/metrics").await;
    let lateness1 = buckets(&page1, "podward_prober_schedule_lateness_seconds");
    let starved: f64 = page1
        .lines()
        .filter(|l| l.starts_with("podward_prober_probes_starved_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();

    let mut gaps = Vec::new();
    let mut failed = 0.0;
    for (i, r) in recorders.iter().enumerate() {
        gaps.extend(r.gaps(from, to));
        failed += sample(
            &probes_page,
            &[
                "prober_probe_total{",
                &format!("pod=\"canary-{i}\""),
                "result=\"failed\"",
            ],
        )
        .unwrap_or(0.0);
    }
    gaps.sort();
    let late = |q: f64| {
        gaps.get(((gaps.len().saturating_sub(1)) as f64 * q) as usize)
            .map(|g| g.saturating_sub(PERIOD).as_secs_f64() * 1e3)
            .unwrap_or(f64::NAN)
    };
    let expected = (o.canaries as f64) * (wall - 1.0);

    // The hostile targets stop; what the prober holds 20 s later.
    child_in.write_all(b"stop\n").await?;
    child_in.flush().await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss_after = proc_status_kib(pid, "VmRSS:");
    let held_after = sample(
        &scrape(admin, "/metrics").await,
        &["podward_prober_target_memory_bytes "],
    );
    let oom = cgroup.oom_kills();
    println!(
        "hostile pods {} x {} probes, canaries {}, window {wall:.1} s, memory limit {} MiB (default budget {} MiB):",
        o.hostile_pods,
        o.probes_per_pod,
        o.canaries,
        o.memory_limit >> 20,
        budget >> 20,
    );
    println!(
        "  canaries: {} probe gaps (expected ~{expected:.0}), lateness p50 {:.1} ms p99 {:.1} ms max {:.1} ms, failed probes {failed}",
        gaps.len(),
        late(0.5),
        late(0.99),
        late(1.0),
    );
    println!(
        "  the prober's own schedule lateness (all probes, bucket bounds): p50 <= {} s, p99 <= {} s; probes starved of CPU (all, since start) {starved}",
        bucket_quantile(&lateness0, &lateness1, 0.5),
        bucket_quantile(&lateness0, &lateness1, 0.99),
    );
    println!(
        "  prober: {} (OOM kills in its cgroup: {oom}); RSS at the window's start {} MiB, peak {} MiB, 20 s after the attack {} MiB; budget held peak {:.1} MiB, after {held_after:?}",
        if alive { "alive" } else { "DIED" },
        rss_start / 1024,
        rss_peak / 1024,
        rss_after / 1024,
        budget_peak / 1048576.0,
    );
    println!(
        "  hostile targets sent {heads:.1} heads' worth of bytes ({:.1}/s); prober CPU {:.2} cores, {:.1} ms per 10 MB head's worth",
        heads / wall,
        cpu / wall,
        cpu * 1e3 / heads,
    );
    let _ = prober.kill().await;
    let _ = prober.wait().await;
    let _ = child.kill().await;
    drop(cgroup);
    Ok(())
}
