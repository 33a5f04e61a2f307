//! What the shim costs on the CRI path, on the real containerd:
//!
//! - the call mix kubelet makes most (Version, ListPodSandbox, ListContainers with 100
//!   containers, ContainerStatus, PodSandboxStatus) at concurrency 1 and 16, direct and through
//!   the shim, interleaved round by round in one run: added p50/p99 latency, throughput ratio;
//! - a ~4 MiB ListContainers answer: added time;
//! - the shim's RSS with 1,000 containers indexed, and its CPU while idle for 10 s.
//!
//! The shim runs as its own process: this bench binary re-executes itself with `--as-shim`
//! (same release build of the library), so its RSS and CPU are the shim's alone.
//!
//! Run: `cargo bench -p podward-e2e --bench shim_overhead` (root; about 3 minutes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podward_api::cri;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_e2e::{BUSYBOX_IMAGE, PodSpec, TestNode, free_port};
use tonic::transport::Channel;

const MIX_ROUNDS: usize = 10;
const MIXES_PER_ROUND: usize = 100;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--as-shim") {
        as_shim(&args[2..]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        // `cargo bench -- --list` style probes: nothing to list.
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(bench());
}

/// The shim, in this process (child mode).
fn as_shim(args: &[String]) {
    // The same runtime flavour as `podward-shim`'s main (see shim/src/main.rs).
    let rt = if args.get(4).map(String::as_str) == Some("multi") {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("runtime");
    let config = podward_shim::config::Config {
        listen: PathBuf::from(&args[0]),
        control_socket: PathBuf::from(&args[1]),
        containerd_socket: PathBuf::from(&args[2]),
        admin_addr: args[3].parse().expect("admin addr"),
        log_level: "warn".into(),
        ..Default::default()
    };
    rt.block_on(async move {
        if let Err(e) = podward_shim::run(config, podward_api::daemon::signal::shutdown()).await {
            eprintln!("shim failed: {e}");
            std::process::exit(1);
        }
    });
}

struct ShimProcess {
    child: std::process::Child,
    cri: PathBuf,
    control: PathBuf,
}

impl Drop for ShimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_shim(node: &TestNode) -> ShimProcess {
    let cri = node.dir().join("bench-shim.sock");
    let control = node.dir().join("bench-shim-control.sock");
    let admin = format!("127.0.0.1:{}", free_port());
    let exe = std::env::current_exe().expect("current exe");
    let child = std::process::Command::new(exe)
        .arg("--as-shim")
        .arg(&cri)
        .arg(&control)
        .arg(node.containerd_socket())
        .arg(&admin)
        .spawn()
        .expect("spawn shim");
    let shim = ShimProcess {
        child,
        cri,
        control,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = client(&shim.cri);
        if c.version(cri::VersionRequest::default()).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "shim did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shim
}

fn client(path: &Path) -> RuntimeServiceClient<Channel> {
    RuntimeServiceClient::new(podward_api::socket::channel(path.to_owned()))
        .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES)
}

fn sandbox_config(node: &TestNode, name: &str) -> cri::PodSandboxConfig {
    PodSpec::new(name)
        .namespace("bench")
        .uid(&format!("uid-{name}"))
        .sandbox_config(node)
        .expect("sandbox config")
}

/// A sandbox with `n` created (not started) containers, each with `annotation_bytes` of
/// annotations; returns (sandbox id, container ids).
async fn populate(
    node: &TestNode,
    via: &Path,
    name: &str,
    n: usize,
    annotation_bytes: usize,
) -> (String, Vec<String>) {
    let mut c = client(via);
    let config = sandbox_config(node, name);
    let sid = c
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let blob = "a".repeat(annotation_bytes);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let mut annotations = HashMap::new();
        if annotation_bytes > 0 {
            annotations.insert("bench/blob".to_owned(), blob.clone());
        }
        let mut labels = HashMap::new();
        labels.insert("io.kubernetes.pod.uid".to_owned(), format!("uid-{name}"));
        let cfg = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: format!("c{i}"),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: BUSYBOX_IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["sleep".into(), "3600".into()],
            envs: vec![cri::KeyValue {
                key: "N".into(),
                value: i.to_string(),
            }],
            labels,
            annotations,
            log_path: format!("c{i}.log"),
            ..Default::default()
        };
        let id = c
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sid.clone(),
                config: Some(cfg),
                sandbox_config: Some(config.clone()),
            })
            .await
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        ids.push(id);
    }
    (sid, ids)
}

/// One mix: the five calls; returns each call's latency.
async fn mix(c: &mut RuntimeServiceClient<Channel>, sid: &str, cid: &str, out: &mut Vec<Duration>) {
    let t = Instant::now();
    c.version(cri::VersionRequest::default())
        .await
        .expect("Version");
    out.push(t.elapsed());
    let t = Instant::now();
    c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .expect("ListPodSandbox");
    out.push(t.elapsed());
    let t = Instant::now();
    let filter = cri::ContainerFilter {
        pod_sandbox_id: sid.to_owned(),
        ..Default::default()
    };
    c.list_containers(cri::ListContainersRequest {
        filter: Some(filter),
    })
    .await
    .expect("ListContainers");
    out.push(t.elapsed());
    let t = Instant::now();
    c.container_status(cri::ContainerStatusRequest {
        container_id: cid.to_owned(),
        verbose: false,
    })
    .await
    .expect("ContainerStatus");
    out.push(t.elapsed());
    let t = Instant::now();
    c.pod_sandbox_status(cri::PodSandboxStatusRequest {
        pod_sandbox_id: sid.to_owned(),
        verbose: false,
    })
    .await
    .expect("PodSandboxStatus");
    out.push(t.elapsed());
}

/// `MIXES_PER_ROUND` mixes spread over `conc` tasks; latencies and wall time.
async fn round(path: &Path, conc: usize, sid: &str, cid: &str) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let mut c = client(path);
        let (sid, cid) = (sid.to_owned(), cid.to_owned());
        let per = MIXES_PER_ROUND / conc.max(1);
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..per {
                mix(&mut c, &sid, &cid, &mut out).await;
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    (all, started.elapsed())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn proc_status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: utime is the 14th field, stime the 15th.
    let rest = s.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

async fn bench() {
    let node = TestNode::start().await.expect("node");
    let shim = start_shim(&node).await;
    let direct = node.containerd_socket();
    println!(
        "# podward-shim overhead (containerd 1.6, release build, {} cores)",
        num_cpus()
    );

    let (sid, cids) = populate(&node, &direct, "mix", 100, 0).await;
    let cid = cids[0].clone();
    // Warm up both paths.
    let _ = round(&direct, 1, &sid, &cid).await;
    let _ = round(&shim.cri, 1, &sid, &cid).await;

    for conc in [1usize, 16] {
        let (mut d_lat, mut s_lat) = (Vec::new(), Vec::new());
        let (mut d_wall, mut s_wall) = (Duration::ZERO, Duration::ZERO);
        for r in 0..MIX_ROUNDS {
            // Alternate which path goes first so drift hits both equally.
            let order: [&Path; 2] = if r % 2 == 0 {
                [&direct, &shim.cri]
            } else {
                [&shim.cri, &direct]
            };
            for p in order {
                let (lat, wall) = round(p, conc, &sid, &cid).await;
                if p == direct.as_path() {
                    d_lat.extend(lat);
                    d_wall += wall;
                } else {
                    s_lat.extend(lat);
                    s_wall += wall;
                }
            }
        }
        d_lat.sort();
        s_lat.sort();
        let calls = d_lat.len() as f64;
        let (d_tp, s_tp) = (
            calls / d_wall.as_secs_f64(),
            s_lat.len() as f64 / s_wall.as_secs_f64(),
        );
        println!(
            "concurrency {conc:>2}: p50 direct {:.0} µs, shim {:.0} µs (+{:.0} µs); p99 direct {:.0} µs, shim {:.0} µs (+{:.0} µs); throughput direct {:.0}/s, shim {:.0}/s ({:.1}%)",
            us(pct(&d_lat, 0.5)),
            us(pct(&s_lat, 0.5)),
            us(pct(&s_lat, 0.5)) - us(pct(&d_lat, 0.5)),
            us(pct(&d_lat, 0.99)),
            us(pct(&s_lat, 0.99)),
            us(pct(&s_lat, 0.99)) - us(pct(&d_lat, 0.99)),
            d_tp,
            s_tp,
            100.0 * s_tp / d_tp
        );
    }

    // ~4 MiB ListContainers: 100 containers with 40 KiB of annotations each.
    let (big_sid, _) = populate(&node, &direct, "big", 100, 40 * 1024).await;
    let filter = cri::ContainerFilter {
        pod_sandbox_id: big_sid.clone(),
        ..Default::default()
    };
    let mut size = 0usize;
    let (mut d, mut s) = (Vec::new(), Vec::new());
    for i in 0..40 {
        for p in if i % 2 == 0 {
            [&direct, &shim.cri]
        } else {
            [&shim.cri, &direct]
        } {
            let mut c = client(p);
            let t = Instant::now();
            let r = c
                .list_containers(cri::ListContainersRequest {
                    filter: Some(filter.clone()),
                })
                .await
                .expect("big ListContainers")
                .into_inner();
            let e = t.elapsed();
            size = tonic_prost::prost::Message::encoded_len(&r);
            if p == &direct { d.push(e) } else { s.push(e) }
        }
    }
    d.sort();
    s.sort();
    println!(
        "ListContainers of {:.2} MiB: median direct {:.2} ms, shim {:.2} ms (+{:.2} ms)",
        size as f64 / (1 << 20) as f64,
        us(pct(&d, 0.5)) / 1e3,
        us(pct(&s, 0.5)) / 1e3,
        (us(pct(&s, 0.5)) - us(pct(&d, 0.5))) / 1e3
    );

    // 1,000 containers indexed: created through the shim (it indexes them as it forwards).
    let pid = shim.child.id();
    let rss_before = proc_status_kb(pid, "VmRSS:");
    for b in 0..10 {
        let _ = populate(&node, &shim.cri, &format!("many-{b}"), 90, 0).await;
    }
    let snap = podward_api::shim::v1::lifecycle_client::LifecycleClient::new(
        podward_api::socket::channel(shim.control.clone()),
    )
    .max_decoding_message_size(podward_api::limits::API_MESSAGE_BYTES)
    .snapshot(podward_api::shim::v1::SnapshotRequest {})
    .await
    .expect("snapshot")
    .into_inner();
    let rss = proc_status_kb(pid, "VmRSS:");
    println!(
        "shim RSS with {} containers / {} sandboxes indexed: {:.1} MiB (was {:.1} MiB before the 900 new ones)",
        snap.containers.len(),
        snap.sandboxes.len(),
        rss as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );

    let ticks_per_s = 100.0; // USER_HZ on Linux
    let t0 = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t1 = cpu_ticks(pid);
    println!(
        "shim idle CPU over 10 s: {:.2}% of one core ({} ticks)",
        (t1 - t0) as f64 / ticks_per_s / 10.0 * 100.0,
        t1 - t0
    );
    drop(shim);
    drop(node);
}

fn num_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
