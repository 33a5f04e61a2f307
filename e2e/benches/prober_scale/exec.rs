//! Exec probes on a real containerd: the prober's exec probe through CRI `ExecSync` (`CriExec`)
//! and through direct exec (`DirectExec`, `--exec-mode direct`), alternated in batches on the same
//! container, with a bare `ExecSync` as the CRI reference.
//!
//! CPU per probe is the CPU of every process an exec probe involves: this process (the prober
//! side) with its reaped children (a direct-exec helper it started, with its reaper and the probe
//! command), the standby zygote with the children it reaped (the helpers it forked, with theirs),
//! and every process of the test node (containerd, the runc shim, with `runc` and the CRI probe
//! commands it reaped), read from `/proc/<pid>/stat` (utime+stime+cutime+cstime) before and after
//! each batch. Other load on the machine does not count in it; the machine-wide figure from
//! `/proc/stat` is printed beside it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podward_api::cri::ExecSyncRequest;
use podward_e2e::{ContainerSpec, Driver, PodSpec, TestNode, bin_path};
use podward_prober::direct_exec::init::ZYGOTE_ARG;
use podward_prober::direct_exec::{DirectExec, ExecMode};
use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::handler::exec::cri::CriExec;
use podward_prober::handler::exec::runner::ExecRunner;
use podward_prober::model::outcome::Outcome;
use podward_prober::probing::probe::{Prober, ProberOptions};
use podward_prober::spec::{ProbeSpec, ProbeType, parse_pod_probes};

/// Runs per batch: the runners take turns every `BATCH` probes.
const BATCH: usize = 25;

/// One way of running the probe: latencies (ms) and CPU (clock ticks) over its batches.
#[derive(Default)]
pub(crate) struct Way {
    pub(crate) ms: Vec<f64>,
    pub(crate) tree_ticks: u64,
    pub(crate) machine_ticks: u64,
    /// Of `tree_ticks`: this process itself, and its reaped children (the direct-exec helpers).
    pub(crate) own_ticks: u64,
    pub(crate) children_ticks: u64,
}

impl Way {
    pub(crate) fn p(&mut self, q: f64) -> f64 {
        self.ms.sort_by(|a, b| a.total_cmp(b));
        let i = ((self.ms.len() as f64 - 1.0) * q).round() as usize;
        self.ms[i]
    }

    /// CPU per probe in ms, over the involved processes and machine-wide.
    pub(crate) fn cpu_ms(&self) -> (f64, f64) {
        (self.per(self.tree_ticks), self.per(self.machine_ticks))
    }

    /// CPU per probe in ms: this process's own, its reaped children's, the node's.
    pub(crate) fn split_ms(&self) -> (f64, f64, f64) {
        (
            self.per(self.own_ticks),
            self.per(self.children_ticks),
            self.per(self.tree_ticks - self.own_ticks - self.children_ticks),
        )
    }

    fn per(&self, ticks: u64) -> f64 {
        ticks as f64 * 1e3 / ticks_per_second() / self.ms.len() as f64
    }

    /// Adds what was used since `start` (from [`Sample::now`]).
    fn add(&mut self, start: Sample, node_dir: &Path) {
        let end = Sample::now(node_dir);
        self.tree_ticks += end.tree - start.tree;
        self.machine_ticks += end.machine - start.machine;
        self.own_ticks += end.own - start.own;
        self.children_ticks += end.children - start.children;
    }
}

/// CPU counters at one moment, in clock ticks.
#[derive(Clone, Copy)]
struct Sample {
    tree: u64,
    machine: u64,
    own: u64,
    children: u64,
}

impl Sample {
    fn now(node_dir: &Path) -> Sample {
        let f = stat_fields("self");
        let zygotes = zygote_ticks();
        Sample {
            tree: tree_ticks(node_dir) + zygotes,
            machine: machine_ticks(),
            own: f[0] + f[1],
            children: f[2] + f[3] + zygotes,
        }
    }
}

/// utime+stime+cutime+cstime of the standby zygotes this process started: they live across
/// batches, so their helpers' CPU never reaches this process's own children's time.
fn zygote_ticks() -> u64 {
    let me = std::process::id().to_string();
    let mut sum = 0;
    for (pid, cmdline) in processes() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1));
        if cmdline.contains(ZYGOTE_ARG) && parent == Some(me.as_str()) {
            sum += proc_ticks(&pid);
        }
    }
    sum
}

/// Every process's PID and command line (its arguments joined by NULs).
fn processes() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e
            .file_name()
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_owned)
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        out.push((pid, String::from_utf8_lossy(&cmdline).into_owned()));
    }
    out
}

/// The three ways, measured side by side.
pub(crate) struct ExecNumbers {
    pub(crate) runs: usize,
    pub(crate) bare_cri: Way,
    pub(crate) cri: Way,
    pub(crate) direct: Way,
    /// Direct exec without a standby helper: each probe starts its helper.
    pub(crate) direct_cold: Way,
}

fn ticks_per_second() -> f64 {
    // CLK_TCK is 100 on every Linux architecture the project builds for (x86_64, aarch64).
    100.0
}

/// utime, stime, cutime, cstime of `pid`, in clock ticks (fields 14..=17 of stat(5)).
fn stat_fields(pid: &str) -> [u64; 4] {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let mut out = [0; 4];
    if let Some((_, rest)) = stat.rsplit_once(") ") {
        // `rest` starts at field 3.
        for (o, f) in out.iter_mut().zip(rest.split(' ').skip(11)) {
            *o = f.parse().unwrap_or(0);
        }
    }
    out
}

/// utime+stime+cutime+cstime of `pid`, in clock ticks.
fn proc_ticks(pid: &str) -> u64 {
    stat_fields(pid).iter().sum()
}

/// CPU ticks of this process and of every process whose command line names the node's
/// directory (containerd, its shims).
fn tree_ticks(node_dir: &Path) -> u64 {
    let dir = node_dir.to_string_lossy().into_owned();
    let mut sum = proc_ticks("self");
    for (pid, cmdline) in processes() {
        if cmdline.contains(&dir) {
            sum += proc_ticks(&pid);
        }
    }
    sum
}

/// Busy clock ticks of the whole machine (`/proc/stat`'s cpu line without idle and iowait).
fn machine_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    line.split_whitespace()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .filter_map(|(_, f)| f.parse::<u64>().ok())
        .sum()
}

/// Probes `n` times through `prober`, adding latencies and CPU to `way`.
async fn batch(
    way: &mut Way,
    n: usize,
    gap: Duration,
    node_dir: &Path,
    prober: &Prober,
    spec: &ProbeSpec,
    target: &ProbeTarget<'_>,
) {
    let start = Sample::now(node_dir);
    for _ in 0..n {
        let t = Instant::now();
        let v = prober.probe(ProbeType::Liveness, spec, target).await;
        way.ms.push(t.elapsed().as_secs_f64() * 1e3);
        pause(gap).await;
        assert!(
            matches!(&v, Outcome::Success(_) | Outcome::Warning(_)),
            "{v:?}"
        );
    }
    way.add(start, node_dir);
}

/// Waits `gap` between two probes (none when zero): a node's exec probes come spread over their
/// periods, not back to back.
async fn pause(gap: Duration) {
    if !gap.is_zero() {
        tokio::time::sleep(gap).await;
    }
}

pub(crate) async fn measure(
    runs: usize,
    gap: Duration,
) -> Result<ExecNumbers, Box<dyn std::error::Error>> {
    let node = TestNode::start().await?;
    let driver = Driver::connect(&node.containerd_socket()).await?;
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("exec-bench")
                .grace_period(1)
                .container(ContainerSpec::new("app", &["sleep", "3600"])),
        )
        .await?;
    let id = pod.container_id("app").ok_or("no container")?;
    let channel = podward_api::socket::channel(node.containerd_socket());
    let options = || ProberOptions {
        kube_version: "1.33".into(),
    };
    let cri = Prober::new(options(), Arc::new(CriExec::new(channel.clone())));
    let direct_runner = DirectExec::new(
        ExecMode::Direct,
        channel.clone(),
        bin_path("podward-prober"),
    );
    let direct = Prober::new(options(), Arc::new(direct_runner) as Arc<dyn ExecRunner>);
    let cold_runner = DirectExec::with_standby(
        ExecMode::Direct,
        channel.clone(),
        bin_path("podward-prober"),
        false,
    );
    let direct_cold = Prober::new(options(), Arc::new(cold_runner) as Arc<dyn ExecRunner>);
    let parsed = parse_pod_probes(
        r#"{"app":{"livenessProbe":{"exec":{"command":["true"]},"timeoutSeconds":5}}}"#,
    );
    let spec = parsed.containers["app"].liveness.clone().ok_or("spec")?;
    let mut client = podward_api::cri::runtime_service_client::RuntimeServiceClient::new(channel);
    let target = ProbeTarget {
        host_ip: "127.0.0.1".parse()?,
        container_id: &id,
        ports: &[],
        env: &[],
    };
    let dir = node.dir().to_owned();
    // Warm-up: connections, the direct runner's per-container plan, page cache.
    let mut scratch = Way::default();
    batch(&mut scratch, 5, gap, &dir, &cri, &spec, &target).await;
    batch(&mut scratch, 5, gap, &dir, &direct, &spec, &target).await;
    batch(&mut scratch, 5, gap, &dir, &direct_cold, &spec, &target).await;

    let (mut bare_cri, mut via_cri, mut via_direct, mut via_cold) = (
        Way::default(),
        Way::default(),
        Way::default(),
        Way::default(),
    );
    let mut done = 0;
    while done < runs {
        let n = BATCH.min(runs - done);
        batch(&mut via_cri, n, gap, &dir, &cri, &spec, &target).await;
        batch(&mut via_direct, n, gap, &dir, &direct, &spec, &target).await;
        batch(&mut via_cold, n, gap, &dir, &direct_cold, &spec, &target).await;
        let start = Sample::now(&dir);
        for _ in 0..n {
            let t = Instant::now();
            let r = client
                .exec_sync(ExecSyncRequest {
                    container_id: id.clone(),
                    cmd: vec!["true".into()],
                    timeout: 5,
                })
                .await?
                .into_inner();
            bare_cri.ms.push(t.elapsed().as_secs_f64() * 1e3);
            pause(gap).await;
            assert_eq!(r.exit_code, 0);
        }
        bare_cri.add(start, &dir);
        done += n;
    }
    pod.delete().await?;
    Ok(ExecNumbers {
        runs,
        bare_cri,
        cri: via_cri,
        direct: via_direct,
        direct_cold: via_cold,
    })
}
