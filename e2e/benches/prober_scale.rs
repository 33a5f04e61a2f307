//! Prober scale benchmark (`harness = false`).
//!
//! `cargo bench -p podward-e2e --bench prober_scale -- [--containers N] [--period S]
//! [--window S] [--mix slr|lr] [--exec-runs N] [--exec-gap-ms N] [--floor] [--threads N]`
//!
//! `--threads N` sets the runtime's worker threads (default: one per core, as the prober's).
//!
//! `--floor` then runs the same connections from bare tokio tasks (see `floor.rs`) over the
//! same window and prints the prober's CPU as a ratio of that floor.
//!
//! The prober runs in this process, wired as the daemon wires it
//! (`podward_prober::daemon::run_with`, with a stopper that counts kills instead of stopping
//! containers); the HTTP/TCP targets and a fake shim Lifecycle server (tonic, unix socket) with a
//! synthetic snapshot run in a child process (this binary re-executed) so CPU and RSS below are
//! the prober's own.
//! Reports probes/s, CPU cores, RSS (now and peak, after one full `/metrics` render), scheduling
//! lateness p50/p99 and false failures; then exec probes on a real containerd (`exec.rs`): CRI
//! vs direct exec, latency and CPU per probe.

#[path = "prober_scale/exec.rs"]
mod exec;
#[path = "prober_scale/floor.rs"]
mod floor;
#[path = "prober_scale/lifecycle.rs"]
mod lifecycle;
#[path = "prober_scale/servers.rs"]
mod servers;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_free::BoxFuture;
use podward_api::daemon::admin::Admin;
use podward_prober::clock::Clock;
use podward_prober::daemon::{Config, Options, Parts};
use podward_prober::metrics::FineHistogram;
use podward_prober::stopper::{StopError, Stopper};

/// `BoxFuture` without a `futures` dependency in this crate.
mod futures_free {
    pub(crate) type BoxFuture<'a, T> =
        std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

const ROLE: &str = "PODWARD_BENCH_ROLE";
const SHIM_SOCKET: &str = "PODWARD_BENCH_SHIM_SOCKET";

struct Opts {
    containers: usize,
    period: u32,
    window: u64,
    mix: lifecycle::Mix,
    exec_runs: usize,
    exec_gap_ms: u64,
    floor: bool,
    threads: Option<usize>,
}

/// `--help`.
const USAGE: &str = "\
prober scale benchmark: the prober (run_with) against a synthetic node, then exec overhead

cargo bench -p podward-e2e --bench prober_scale -- [FLAGS]

  --containers N   pods of one container each (default 10000; 0: the exec figures alone)
  --period S       probe period in seconds (default 1)
  --window S       measurement window in seconds, after a warm-up (default 30)
  --mix slr|lr     startup+liveness+readiness, or liveness+readiness (default slr)
  --exec-runs N    exec probes on a real containerd, each way (CRI ExecSync bare, the prober
                   with --exec-mode cri, with --exec-mode direct, and direct with
                   --exec-standby=false), alternated in batches of 25: latency and CPU per
                   probe; 0 skips (default 200)
  --exec-gap-ms N  pause between two exec probes, as a node's probes come spread over their
                   periods (default 0: back to back)
  --floor          also run the same connections from bare tokio tasks and print the ratio
  --threads N      runtime worker threads (default: one per core, as the prober's)
  --help           this text
";

fn opts() -> Opts {
    let mut o = Opts {
        containers: 10_000,
        period: 1,
        window: 30,
        mix: lifecycle::Mix::StartupLivenessReadiness,
        exec_runs: 200,
        exec_gap_ms: 0,
        floor: false,
        threads: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--containers" => o.containers = v.parse().unwrap_or(o.containers),
            "--period" => o.period = v.parse().unwrap_or(o.period),
            "--window" => o.window = v.parse().unwrap_or(o.window),
            "--mix" => {
                o.mix = if v == "lr" {
                    lifecycle::Mix::LivenessReadiness
                } else {
                    lifecycle::Mix::StartupLivenessReadiness
                }
            }
            "--exec-runs" => o.exec_runs = v.parse().unwrap_or(o.exec_runs),
            "--exec-gap-ms" => o.exec_gap_ms = v.parse().unwrap_or(o.exec_gap_ms),
            "--threads" => o.threads = v.parse().ok(),
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--floor" => {
                o.floor = true;
                i += 1;
                continue;
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

/// Counts kills (there must be none: every target is healthy).
#[derive(Default)]
struct CountKills(AtomicU64);

impl Stopper for CountKills {
    fn stop_container(&self, _: String, _: i64) -> BoxFuture<'_, Result<(), StopError>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }
}

/// utime+stime of this process, seconds (USER_HZ is 100 on Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Renders `/metrics` with the admin endpoint's own renderer (registry text, then the streamed
/// series in chunks, each dropped once "sent"); returns the bytes and the time it took.
fn render_metrics(admin: &Admin) -> Result<(usize, Duration), prometheus::Error> {
    let t = Instant::now();
    let bytes = admin.render_metrics()?.map(|chunk| chunk.len()).sum();
    Ok((bytes, t.elapsed()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = opts();
    if std::env::var(ROLE).as_deref() == Ok("server") {
        let sock = std::path::PathBuf::from(std::env::var(SHIM_SOCKET)?);
        return servers::serve(20, 10, |targets| async move {
            let now = Clock::system().now_ns();
            let snap = lifecycle::snapshot(o.containers, o.period, o.mix, &targets, now);
            lifecycle::serve(&sock, snap).await
        });
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = o.threads {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build()?;
    // `--containers 0`: the exec figures alone.
    if o.containers > 0 {
        // The targets and the fake shim: a child process, so their CPU and memory are not counted
        // as the prober's.
        let dir = tempfile::tempdir()?;
        let shim_sock = dir.path().join("shim.sock");
        let mut child = Command::new(std::env::current_exe()?)
            .args(std::env::args().skip(1))
            .env(ROLE, "server")
            .env(SHIM_SOCKET, &shim_sock)
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("child stdout")?;
        let mut lines = Vec::new();
        for l in std::io::BufReader::new(stdout).lines() {
            let l = l?;
            if l == "ready" {
                break;
            }
            lines.push(l);
        }
        let targets = servers::parse(&lines);
        let res = rt.block_on(scale(&o, &shim_sock));
        let res = match res {
            Ok(prober_cores) if o.floor => rt
                .block_on(floor_run(&o, &targets))
                .map(|floor| match floor {
                    Some(floor_cores) => println!(
                        "prober CPU / floor CPU at the same rate: {:.2} ({prober_cores:.2} / {floor_cores:.2} cores)",
                        prober_cores / floor_cores
                    ),
                    // Failed connections cost less than completed ones: a ratio to such a
                    // floor would flatter the prober.
                    None => println!(
                        "no prober/floor ratio: the floor had failed connections, so it is not a floor at this rate"
                    ),
                }),
            r => r.map(|_| ()),
        };
        let _ = child.kill();
        let _ = child.wait();
        res?;
    }
    if o.exec_runs > 0 {
        let gap = Duration::from_millis(o.exec_gap_ms);
        let mut n = rt.block_on(exec::measure(o.exec_runs, gap))?;
        println!(
            "exec probes ({} runs each, `true` in a busybox container, alternated in batches of 25, {} ms between probes):",
            n.runs, o.exec_gap_ms
        );
        let mut ratio = Vec::new();
        for (name, w) in [
            ("bare CRI ExecSync", &mut n.bare_cri),
            ("prober, --exec-mode cri", &mut n.cri),
            ("prober, --exec-mode direct", &mut n.direct),
            ("  the same, no standby", &mut n.direct_cold),
        ] {
            let (tree, machine) = w.cpu_ms();
            let (own, children, node) = w.split_ms();
            ratio.push(tree);
            println!(
                "  {name:<27} p50 {:6.2} ms  p90 {:6.2} ms  CPU/probe {tree:6.2} ms (prober {own:.2} + its helpers {children:.2} + containerd/shim/runc/command {node:.2})  {machine:6.2} ms (whole machine)",
                w.p(0.5),
                w.p(0.9),
            );
        }
        println!("direct ÷ cri CPU per probe: {:.3}", ratio[2] / ratio[1]);
    }
    Ok(())
}

/// The same connections without the prober (`--floor`); returns its CPU cores, or `None` when
/// any connection failed in the window (the floor did not do the work the prober did).
async fn floor_run(
    o: &Opts,
    targets: &[servers::Target],
) -> Result<Option<f64>, Box<dyn std::error::Error>> {
    let period = Duration::from_secs(u64::from(o.period));
    // Both mixes settle at one TCP and one HTTP probe per container and period (a startup probe
    // stops once it succeeds).
    let counts = floor::start(o.containers, period, targets);
    tokio::time::sleep(period * 2 + Duration::from_secs(1)).await;
    let (done0, failed0) = (
        counts.done.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.window)).await;
    let wall = t0.elapsed().as_secs_f64();
    let cores = (cpu_seconds() - cpu0) / wall;
    let done = counts.done.load(Ordering::Relaxed) - done0;
    let failed = counts.failed.load(Ordering::Relaxed) - failed0;
    println!(
        "floor (bare connections, same targets and rate): {:.0} connections/s, failed {failed}, CPU {cores:.2} cores",
        (done + failed) as f64 / wall
    );
    Ok((failed == 0).then_some(cores))
}

/// Runs the prober over the window and prints its figures; returns its CPU cores.
async fn scale(o: &Opts, shim_sock: &std::path::Path) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = Config {
        socket: dir.path().join("prober.sock"),
        shim_socket: shim_sock.to_owned(),
        // No exec probes here: containerd's socket points at nothing.
        common: podward_api::daemon::config::Common {
            containerd_socket: dir.path().join("no-containerd.sock"),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        node_ip: Some("127.0.0.1".parse()?),
        poll_interval_seconds: 3600,
        ..Config::default()
    };
    let kills = Arc::new(CountKills::default());
    // The prober's parts, and the RSS before any worker (the source starts after `on_start`).
    let (parts_tx, parts_rx) = tokio::sync::oneshot::channel::<(Parts, u64)>();
    let options = Options {
        stopper: Some(kills.clone()),
        on_start: Some(Box::new(move |parts| {
            let _ = parts_tx.send((parts, status_kib("VmRSS:")));
        })),
        ..Options::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let prober = tokio::spawn(podward_prober::daemon::run_with(
        config,
        options,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let Ok((parts, rss0)) = parts_rx.await else {
        // It failed before it started: its error says why.
        prober.await??;
        return Err("the prober ended before it started".into());
    };
    let Parts {
        manager,
        metrics,
        admin,
        ..
    } = parts;
    let per = if o.mix == lifecycle::Mix::LivenessReadiness {
        2
    } else {
        3
    };
    let want = o.containers * per;
    let t = Instant::now();
    while manager.registry().worker_count() < want {
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "only {} of {want} workers after 60 s",
                manager.registry().worker_count()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("{want} workers up in {:.2} s", t.elapsed().as_secs_f64());
    // Warm-up: past the start-up jitter (one period) and the startup probes' success.
    tokio::time::sleep(Duration::from_secs(u64::from(o.period) * 3 + 2)).await;

    let (ok0, failed0) = metrics.series().totals();
    let late0 = metrics.fine_lateness().counts();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut rss_max = 0;
    while t0.elapsed() < Duration::from_secs(o.window) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_max = rss_max.max(status_kib("VmRSS:"));
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let (ok1, failed1) = metrics.series().totals();
    let late: Vec<u64> = metrics
        .fine_lateness()
        .counts()
        .iter()
        .zip(&late0)
        .map(|(a, b)| a - b)
        .collect();
    let p = |q| {
        FineHistogram::quantile(&late, q)
            .map(|d| d.as_secs_f64() * 1e3)
            .unwrap_or(f64::NAN)
    };
    let probes = ((ok1 - ok0) + (failed1 - failed0)) as f64;
    let scrape = render_metrics(&admin)?;
    println!(
        "containers {} mix {:?} period {} s window {:.1} s: workers {want}, probes/s {:.0} (expected {:.0}), CPU {:.2} cores, RSS {} MiB (max {} MiB, before workers {} MiB, peak after a scrape {} MiB; scrape {:.1} MB in {:.0} ms), lateness p50 {:.1} ms p99 {:.1} ms, failed probes {}, kills {}",
        o.containers,
        o.mix,
        o.period,
        wall,
        probes / wall,
        (o.containers * 2) as f64 / f64::from(o.period),
        cpu / wall,
        status_kib("VmRSS:") / 1024,
        rss_max / 1024,
        rss0 / 1024,
        status_kib("VmHWM:") / 1024,
        scrape.0 as f64 / 1e6,
        scrape.1.as_secs_f64() * 1e3,
        p(0.5),
        p(0.99),
        failed1 - failed0,
        kills.0.load(Ordering::Relaxed),
    );
    // A few failure outputs, to tell a prober problem from a target problem (only then: a
    // Status of every worker is large and would count in the peak above).
    let mut shown = 0;
    let failing = if failed1 > failed0 {
        manager.view().status(None).pods
    } else {
        Vec::new()
    };
    for p in failing {
        for c in p.containers {
            for pr in c.probes {
                if pr.consecutive_failures > 0 && shown < 3 {
                    println!("  failing probe of {}: {:?}", p.pod_name, pr.last_output);
                    shown += 1;
                }
            }
        }
    }
    let _ = stop_tx.send(());
    prober.await??;
    // Let the stopped workers' last probes finish before a floor run measures CPU.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(cpu / wall)
}
