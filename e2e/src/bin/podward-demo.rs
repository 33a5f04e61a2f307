//! `podward-demo`: podward running for real on a private node — a containerd the demo starts in a
//! temporary directory, the three daemons against it, and a pod with probes driven by a small
//! kubelet-like loop. Prints what the prober and the housekeeper see until Ctrl-C (or `--seconds`),
//! then removes everything it created.
//!
//! The pod has two containers:
//! - `web`: busybox `httpd` on a free loopback port, with HTTP liveness and readiness probes;
//! - `flaky`: healthy for 15 s, then its exec liveness probe (`cat /tmp/healthy`) fails, the prober
//!   stops it through CRI, and the driver (acting as kubelet) restarts it — again and again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::prober::v1::{ProbeResult, ProbeType, StatusRequest};
use podward_e2e::{ContainerSpec, Daemon, Driver, PodSpec, TestNode, free_port};

const SHIM_ADMIN: &str = "127.0.0.1:9641";
const PROBER_ADMIN: &str = "127.0.0.1:9642";
const HOUSEKEEPER_ADMIN: &str = "127.0.0.1:9643";

/// The daemons' admin addresses: the documented defaults, or free ports with `--ephemeral-ports`
/// (so the demo can run beside other tests).
fn admin_addrs(ephemeral: bool) -> [String; 3] {
    if ephemeral {
        [0, 1, 2].map(|_| format!("127.0.0.1:{}", free_port()))
    } else {
        [SHIM_ADMIN, PROBER_ADMIN, HOUSEKEEPER_ADMIN].map(str::to_owned)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let seconds: u64 = match std::env::args().skip_while(|a| a != "--seconds").nth(1) {
        Some(s) => s.parse().context("--seconds takes a number")?,
        None => 0,
    };
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!(
            "podward-demo [--seconds N] [--ephemeral-ports]\n\nStarts a private containerd, podward-shim, podward-prober and \
             podward-housekeeper (dry-run), runs a demo pod with probes, and prints what they see.\n\
             Runs until Ctrl-C, or for N seconds. Needs root. Admin endpoints: shim {SHIM_ADMIN}, \
             prober {PROBER_ADMIN}, housekeeper {HOUSEKEEPER_ADMIN}."
        );
        return Ok(());
    }

    let [shim_admin, prober_admin, hk_admin] =
        admin_addrs(std::env::args().any(|a| a == "--ephemeral-ports"));
    println!("== starting containerd in a temporary root (images are built on first use)");
    let node = TestNode::start().await.context("start containerd")?;
    let dir = node.dir().to_owned();
    let containerd = node.containerd_socket();
    let s = |p: &std::path::Path| p.display().to_string();
    let cri_sock = dir.join("podward/cri.sock");
    let shim_sock = dir.join("podward/shim.sock");
    let prober_sock = dir.join("podward/prober.sock");
    let hk_sock = dir.join("podward/housekeeper.sock");
    let kubelet_root = dir.join("kubelet");
    std::fs::create_dir_all(kubelet_root.join("pods")).context("create kubelet root")?;
    let log_root = dir.join("logs");
    std::fs::create_dir_all(&log_root).context("create log root")?;

    println!("== starting podward-shim, podward-prober, podward-housekeeper");
    let shim = Daemon::spawn(
        "podward-shim",
        &[
            "--listen",
            &s(&cri_sock),
            "--containerd-socket",
            &s(&containerd),
            "--control-socket",
            &s(&shim_sock),
            "--admin-addr",
            &shim_admin,
        ],
    )
    .await?;
    let prober = Daemon::spawn(
        "podward-prober",
        &[
            "--socket",
            &s(&prober_sock),
            "--shim-socket",
            &s(&shim_sock),
            "--containerd-socket",
            &s(&containerd),
            "--node-ip",
            "127.0.0.1",
            "--admin-addr",
            &prober_admin,
        ],
    )
    .await?;
    let housekeeper = Daemon::spawn(
        "podward-housekeeper",
        &[
            "--socket",
            &s(&hk_sock),
            "--shim-socket",
            &s(&shim_sock),
            "--prober-socket",
            &s(&prober_sock),
            "--containerd-socket",
            &s(&containerd),
            "--kubelet-root",
            &s(&kubelet_root),
            "--log-root",
            &s(&log_root),
            "--interval",
            "5s",
            // No --act: the housekeeper's default is a dry run (it plans and deletes nothing).
            "--admin-addr",
            &hk_admin,
            "--log-level",
            "warn",
        ],
    )
    .await?;
    for (d, addr) in [
        (&shim, &shim_admin),
        (&prober, &prober_admin),
        (&housekeeper, &hk_admin),
    ] {
        d.wait_healthy(addr.parse::<SocketAddr>()?, Duration::from_secs(30))
            .await?;
    }

    let port = free_port();
    let probes = serde_json::json!({
        "web": {
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 2},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 2}
        },
        "flaky": {
            "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                              "periodSeconds": 2, "failureThreshold": 1},
            "readinessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 2}
        }
    });
    let web_cmd = format!(
        "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 127.0.0.1:{port} -h /www"
    );
    let spec = PodSpec::new("demo")
        .namespace("default")
        .annotation(podward_api::labels::PODWARD_PROBES, &probes.to_string())
        .grace_period(2)
        .container(ContainerSpec::new("web", &["sh", "-c", &web_cmd]).port("http", port))
        .container(ContainerSpec::new(
            "flaky",
            &[
                "sh",
                "-c",
                "touch /tmp/healthy; sleep 15; rm /tmp/healthy; exec sleep 3600",
            ],
        ));
    println!(
        "== running pod default/demo through the shim (kubelet's view: {})",
        cri_sock.display()
    );
    let driver = Driver::connect(&cri_sock).await?;
    let pod = driver.run_pod(&node, spec).await?;

    let mut prober_api = ProberClient::new(podward_api::socket::channel(&prober_sock));
    let mut hk_api = HousekeeperClient::new(podward_api::socket::channel(&hk_sock));
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(3));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = tick.tick() => {}
        }
        if seconds > 0 && started.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        println!("-- t={:>3}s", started.elapsed().as_secs());
        match prober_api
            .status(StatusRequest {
                pod_uid: pod.uid().to_owned(),
            })
            .await
        {
            Ok(resp) => {
                for p in resp.into_inner().pods {
                    for e in &p.spec_errors {
                        println!(
                            "   probe spec error: {} {}: {}",
                            e.container, e.field, e.message
                        );
                    }
                    for c in p.containers {
                        let last = |ty: ProbeType| {
                            c.probes.iter().find(|s| s.r#type == ty as i32).map(|s| {
                                format!(
                                    "{:?}",
                                    ProbeResult::try_from(s.result).unwrap_or(ProbeResult::Unknown)
                                )
                            })
                        };
                        println!(
                            "   {:<6} restarts={} started={} ready={} live={} kills={} liveness={} readiness={}",
                            c.name,
                            pod.restart_count(&c.name),
                            c.started,
                            c.ready,
                            c.live,
                            c.kills,
                            last(ProbeType::Liveness).unwrap_or_default(),
                            last(ProbeType::Readiness).unwrap_or_default(),
                        );
                    }
                }
            }
            Err(e) => println!("   prober: {}", e.message()),
        }
        match hk_api
            .status(podward_api::housekeeper::v1::StatusRequest {})
            .await
        {
            Ok(st) => {
                let st = st.into_inner();
                let (actions, findings, dry_run) = st
                    .last_pass
                    .map(|p| (p.actions.len(), p.findings.len(), p.dry_run))
                    .unwrap_or((0, 0, true));
                println!(
                    "   housekeeper: {} passes, last plan {} actions / {} findings ({})",
                    st.passes,
                    actions,
                    findings,
                    if dry_run { "dry run" } else { "ACTING" }
                );
            }
            Err(e) => println!("   housekeeper: {}", e.message()),
        }
    }
    println!("== cleaning up");
    pod.delete().await?;
    drop((shim, prober, housekeeper));
    drop(node);
    Ok(())
}
