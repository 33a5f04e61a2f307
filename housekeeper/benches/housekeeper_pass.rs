//! One housekeeper pass over a large fake node, through the real code and the root flags:
//! N pod dirs, N pod cgroup dirs (plain dirs laid out like cgroupfs v2, all three QoS classes),
//! N log dirs, N/10 sandboxes with a container each (an in-process fake CRI server implementing
//! the k8s-cri `RuntimeService` trait, over a unix socket), an N/2-line mountinfo, no shim.
//!
//! Pass 1 sees everything for the first time (orphans WAITING); passes 2..=6 plan every orphan
//! (90% of the UIDs), which includes the read-only assessment walk of each orphan's pod dir.
//! Passes are dry runs, so the tree is the same for every pass. Each size runs in its own child
//! process, so the peak RSS (VmHWM) is that size's.
//!
//! With `--worst F`, orphan 1 is also a hostile pod's leftover: its emptyDir holds one directory
//! of F empty files with 240-byte names (the worst orphan for memory), and orphan 2's removable
//! tree holds more entries than a walk looks at (the worst for time). Both are among the 256
//! lowest UIDs, which every pass assesses.
//!
//! `cargo bench -p podward-housekeeper --bench housekeeper_pass [-- 1000 5000 10000]`
//! `cargo bench -p podward-housekeeper --bench housekeeper_pass -- --worst 600000 1000`

#[path = "../tests/support/fake_cri.rs"]
mod fake_cri;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use podward_api::cri::{Container, ContainerMetadata, PodSandbox, PodSandboxMetadata};
use podward_api::labels;
use podward_housekeeper::Config;
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::run::node_reconciler;

/// Limits from issue 4 at N = 10,000.
const MAX_PASS: Duration = Duration::from_millis(250);
const MAX_RSS_KIB: u64 = 64 * 1024;

fn uid(i: usize) -> String {
    format!("{i:08x}-0000-4000-8000-{i:012x}")
}

fn build_tree(root: &Path, n: usize) -> (Vec<PodSandbox>, Vec<Container>) {
    let cg = root.join("cgroup");
    std::fs::create_dir_all(&cg).expect("mkdir");
    std::fs::write(cg.join("cgroup.controllers"), "cpu memory pids\n").expect("write");
    let mut mountinfo = String::new();
    let mut sandboxes = Vec::new();
    let mut containers = Vec::new();
    for i in 0..n {
        let u = uid(i);
        let qos = match i % 3 {
            0 => String::new(),
            1 => "burstable/".to_owned(),
            _ => "besteffort/".to_owned(),
        };
        std::fs::create_dir_all(cg.join(format!("kubepods/{qos}pod{u}"))).expect("mkdir cgroup");
        let pod = root.join("kubelet/pods").join(&u);
        std::fs::create_dir_all(pod.join("volumes/kubernetes.io~empty-dir/data")).expect("mkdir");
        std::fs::create_dir_all(pod.join("volumes/kubernetes.io~projected/kube-api-access"))
            .expect("mkdir");
        std::fs::create_dir_all(pod.join("plugins/kubernetes.io~empty-dir/data")).expect("mkdir");
        std::fs::create_dir_all(pod.join("containers/app")).expect("mkdir");
        std::fs::write(pod.join("etc-hosts"), "127.0.0.1 localhost\n").expect("write");
        let log = root.join(format!("logs/default_pod-{i}_{u}/app"));
        std::fs::create_dir_all(&log).expect("mkdir log");
        std::fs::write(log.join("0.log"), "log line\n").expect("write");
        if i % 10 == 0 {
            // A live pod: its projected volume is mounted, and it has a sandbox and a container.
            let mp = pod.join("volumes/kubernetes.io~projected/kube-api-access");
            let _ = writeln!(
                mountinfo,
                "{} 1 0:{} / {} rw,relatime - tmpfs tmpfs rw",
                1000 + i,
                100 + i,
                mp.display()
            );
            let sid = format!("sandbox-{i:060}");
            sandboxes.push(PodSandbox {
                id: sid.clone(),
                metadata: Some(PodSandboxMetadata {
                    name: format!("pod-{i}"),
                    uid: u.clone(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                state: 0,
                created_at: 1,
                labels: HashMap::from([(labels::POD_UID.to_owned(), u.clone())]),
                ..Default::default()
            });
            containers.push(Container {
                id: format!("container-{i:058}"),
                pod_sandbox_id: sid,
                metadata: Some(ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                state: 1,
                created_at: 2,
                labels: HashMap::from([(labels::POD_UID.to_owned(), u)]),
                ..Default::default()
            });
        }
    }
    // Fill the mount table to N/2 lines with mounts elsewhere (overlay rootfs, shm, ...).
    let mut j = 0;
    while mountinfo.lines().count() < n / 2 {
        let _ = writeln!(
            mountinfo,
            "{} 1 0:{} / /run/containerd/io.containerd.runtime.v2.task/k8s.io/{j:064}/rootfs rw - overlay overlay rw",
            900_000 + j,
            500_000 + j
        );
        j += 1;
    }
    std::fs::write(root.join("mountinfo"), mountinfo).expect("write mountinfo");
    (sandboxes, containers)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Files in the orphan whose removable tree is larger than a walk looks at.
const TOO_LARGE_FILES: usize = 150_000;

/// `n` empty files with 240-byte names in `dir`.
fn fill(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let pad = "f".repeat(232);
    for i in 0..n {
        std::fs::File::create(dir.join(format!("{pad}{i:08}"))).expect("create");
    }
}

/// The two worst orphans, made of the node's orphans 1 and 2 (among the lowest UIDs, so every
/// pass assesses them): `files` more in the first's emptyDir directory, and
/// [`TOO_LARGE_FILES`] more in the second's `containers/`.
fn add_worst(root: &Path, files: usize) {
    let pods = root.join("kubelet/pods");
    fill(
        &pods
            .join(uid(1))
            .join("volumes/kubernetes.io~empty-dir/data/big"),
        files,
    );
    fill(
        &pods.join(uid(2)).join("containers/app/many"),
        TOO_LARGE_FILES,
    );
}

fn one_size(n: usize, worst: Option<usize>) {
    // TMPDIR picks the filesystem of the fake tree (the report says which was used).
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let built = std::time::Instant::now();
    let (sandboxes, containers) = build_tree(root, n);
    if let Some(files) = worst {
        add_worst(root, files);
    }
    let build_s = built.elapsed().as_secs_f64();
    let (n_sb, n_ct) = (sandboxes.len(), containers.len());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sock = root.join("containerd.sock");
        let _server = fake_cri::serve(
            fake_cri::FakeCri {
                sandboxes,
                containers,
                ..Default::default()
            },
            &sock,
        );
        let config = Config {
            common: podward_api::daemon::config::Common {
                containerd_socket: sock,
                ..Config::default().common
            },
            shim_socket: root.join("no-shim.sock"),
            prober_socket: root.join("no-prober.sock"),
            cgroup_root: root.join("cgroup"),
            kubelet_root: root.join("kubelet"),
            log_root: root.join("logs"),
            mountinfo: root.join("mountinfo"),
            orphan_grace: Duration::ZERO,
            ..Config::default()
        };
        let rec = node_reconciler(&config);
        let (first, t1) = rec.pass(Mode::DryRun).await;
        assert!(first.sources_ok, "{:?}", first.sources);
        let mut steady = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let (p, t) = rec.pass(Mode::DryRun).await;
            steady.push(t);
            last = Some(p);
        }
        steady.sort();
        let median = steady[steady.len() / 2];
        let plan = last.expect("plan");
        let breakdown: Vec<String> = plan
            .sources
            .iter()
            .map(|s| format!("{} {:.1}", s.name, s.duration_ns as f64 / 1e6))
            .collect();
        let rss = vm_hwm_kib();
        let worst = worst.map_or(String::new(), |f| {
            format!("worst_orphan_files={f} too_large_orphan_files={TOO_LARGE_FILES} ")
        });
        println!(
            "RESULT tree={} built_in_s={build_s:.1} {worst}n={n} sandboxes={n_sb} containers={n_ct} mountinfo_lines={} first_pass_ms={:.1} \
             steady_pass_ms_median={:.1} steady_pass_ms_max={:.1} actions={} findings={} rss_peak_mib={:.1} \
             sources_ms=[{}]",
            root.display(),
            n / 2,
            t1.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3,
            steady.last().expect("max").as_secs_f64() * 1e3,
            plan.actions.len(),
            plan.findings.len(),
            rss as f64 / 1024.0,
            breakdown.join(", ")
        );
        if n >= 10_000 {
            let worst = t1.max(*steady.last().expect("max"));
            if worst > MAX_PASS || rss > MAX_RSS_KIB {
                println!("OVER BUDGET at n={n}: pass {worst:?} (limit {MAX_PASS:?}), rss {rss} KiB (limit {MAX_RSS_KIB} KiB)");
            }
        }
    });
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|p| argv.get(p + 1))
            .and_then(|s| s.parse::<usize>().ok())
    };
    let worst = flag("--worst");
    if let Some(n) = flag("--one") {
        one_size(n, worst);
        return;
    }
    // Bare numbers are sizes; the number after a flag is that flag's.
    let sizes: Vec<usize> = argv
        .windows(2)
        .filter(|w| !w[0].starts_with("--"))
        .filter_map(|w| w[1].parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 5_000, 10_000]
    } else {
        sizes
    };
    let exe = std::env::current_exe().expect("current exe");
    for n in sizes {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["--one", &n.to_string()]);
        if let Some(files) = worst {
            cmd.args(["--worst", &files.to_string()]);
        }
        let status = cmd.status().expect("run one size");
        assert!(status.success(), "size {n} failed");
    }
}
