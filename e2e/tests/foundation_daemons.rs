//! Foundation: every podward daemon starts from the built binary with temporary paths while
//! its peers (containerd, shim, prober) are down, answers /healthz, and exits 0 on SIGTERM.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use podward_e2e::{Daemon, free_port};

/// Spawns `name` with `args` plus `--admin-addr`, checks /healthz, then SIGTERM → exit 0.
async fn healthy_then_clean_exit(name: &str, args: &[String]) {
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let admin_flag = admin.to_string();
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    argv.extend(["--admin-addr", &admin_flag, "--log-level", "info"]);
    let mut d = Daemon::spawn(name, &argv).await.expect("spawn");
    d.wait_healthy(admin, Duration::from_secs(30))
        .await
        .expect("healthy");
    let status = d.terminate().await.expect("terminate");
    assert!(
        status.success(),
        "{name} exited with {status} after SIGTERM"
    );
}

#[tokio::test]
async fn daemons_serve_healthz_and_exit_zero_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    for d in ["kubelet", "logs"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
    }
    // Nothing listens on the containerd, shim or prober sockets: every daemon must start anyway.
    let shim = [
        "--listen",
        &p("cri.sock"),
        "--containerd-socket",
        &p("containerd.sock"),
        "--control-socket",
        &p("shim.sock"),
    ];
    let prober = [
        "--socket",
        &p("prober.sock"),
        "--shim-socket",
        &p("shim.sock"),
        "--containerd-socket",
        &p("containerd.sock"),
        "--node-ip",
        "127.0.0.1",
    ];
    let housekeeper = [
        "--socket",
        &p("housekeeper.sock"),
        "--shim-socket",
        &p("shim.sock"),
        "--prober-socket",
        &p("prober.sock"),
        "--containerd-socket",
        &p("containerd.sock"),
        // The real cgroup filesystem: the housekeeper refuses a root without one.
        "--cgroup-root",
        "/sys/fs/cgroup",
        "--kubelet-root",
        &p("kubelet"),
        "--log-root",
        &p("logs"),
        "--dry-run=true",
    ];
    let owned = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    healthy_then_clean_exit("podward-shim", &owned(&shim)).await;
    healthy_then_clean_exit("podward-prober", &owned(&prober)).await;
    healthy_then_clean_exit("podward-housekeeper", &owned(&housekeeper)).await;
}
