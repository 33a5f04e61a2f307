//! What the demo runs before any pod: a private containerd ([`TestNode`]), the API server
//! stand-in, and the three daemons with their logs taken in (shown with `--verbose`; warnings
//! and errors always, and counted).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use podward_e2e::apiserver::MockApiServer;
use podward_e2e::{Daemon, DaemonOutput, Driver, TestNode, free_port};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::args::Args;
use crate::term::{self, Level, Style};

/// The node name the prober is given and the demo's pods are bound to in the API server.
pub(crate) const NODE_NAME: &str = "demo-node";

/// The housekeeper's pass interval and orphan grace (short, so a run of half a minute shows a
/// plan and, with `--act`, its execution).
const HOUSEKEEPER_INTERVAL: &str = "5s";
const ORPHAN_GRACE: &str = "4s";

/// Daemon log lines held for the printer; more are dropped rather than slowing a daemon.
const LOG_QUEUE: usize = 1024;

/// The documented admin endpoints (README "Sockets and APIs").
const ADMIN_ADDRS: [&str; 3] = ["127.0.0.1:9641", "127.0.0.1:9642", "127.0.0.1:9643"];

/// Where everything of the node is.
pub(crate) struct Paths {
    /// The shim's CRI socket (kubelet's `--container-runtime-endpoint`).
    pub(crate) cri_sock: PathBuf,
    /// The prober's API socket.
    pub(crate) prober_sock: PathBuf,
    /// The housekeeper's API socket.
    pub(crate) hk_sock: PathBuf,
    /// kubelet's `--root-dir` (pod directories under `pods/`).
    pub(crate) kubelet_root: PathBuf,
    /// kubelet's pod log root (`/var/log/pods`).
    pub(crate) log_root: PathBuf,
}

/// The running node and daemons.
pub(crate) struct Stack {
    /// containerd in a temporary root.
    pub(crate) node: TestNode,
    /// The Kubernetes API server stand-in the prober talks to.
    pub(crate) api: MockApiServer,
    /// The kubelet-like driver, talking to the shim.
    pub(crate) driver: Driver,
    /// Socket and directory paths.
    pub(crate) paths: Paths,
    /// shim, prober, housekeeper.
    daemons: Vec<Daemon>,
    counts: Arc<LogCounts>,
    printer: JoinHandle<()>,
}

impl Stack {
    /// Starts containerd, the API server stand-in and the daemons, and waits until each daemon
    /// answers `/healthz`.
    pub(crate) async fn start(args: &Args, style: &Style) -> Result<Stack> {
        let node = TestNode::start().await.context("start containerd")?;
        let dir = node.dir().to_owned();
        let paths = Paths {
            cri_sock: dir.join("podward/cri.sock"),
            prober_sock: dir.join("podward/prober.sock"),
            hk_sock: dir.join("podward/housekeeper.sock"),
            kubelet_root: dir.join("kubelet"),
            log_root: dir.join("logs"),
        };
        let shim_sock = dir.join("podward/shim.sock");
        std::fs::create_dir_all(paths.kubelet_root.join("pods")).context("create kubelet root")?;
        std::fs::create_dir_all(&paths.log_root).context("create log root")?;
        let api = MockApiServer::start()
            .await
            .context("start the API server")?;
        let kubeconfig = api.write_kubeconfig(&dir).context("write the kubeconfig")?;

        let admin: [String; 3] = if args.ephemeral_ports {
            [0, 1, 2].map(|_| format!("127.0.0.1:{}", free_port()))
        } else {
            ADMIN_ADDRS.map(str::to_owned)
        };
        let (tx, rx) = mpsc::channel(LOG_QUEUE);
        let counts = Arc::new(LogCounts::default());
        let printer = tokio::spawn(print_logs(rx, args.verbose, counts.clone(), style.clone()));
        let s = |p: &std::path::Path| p.display().to_string();
        let containerd = s(&node.containerd_socket());
        let act = if args.act { vec!["--act"] } else { Vec::new() };
        let specs: [(&str, Vec<String>); 3] = [
            (
                "podward-shim",
                [
                    "--listen",
                    &s(&paths.cri_sock),
                    "--containerd-socket",
                    &containerd,
                    "--control-socket",
                    &s(&shim_sock),
                ]
                .map(str::to_owned)
                .to_vec(),
            ),
            (
                "podward-prober",
                [
                    "--socket",
                    &s(&paths.prober_sock),
                    "--shim-socket",
                    &s(&shim_sock),
                    "--containerd-socket",
                    &containerd,
                    "--node-ip",
                    "127.0.0.1",
                    "--node-name",
                    NODE_NAME,
                    "--kubeconfig",
                    &s(&kubeconfig),
                    // No sentinel runs in the demo: a lease would only add requests to its log.
                    "--node-lease-duration-seconds",
                    "0",
                ]
                .map(str::to_owned)
                .to_vec(),
            ),
            (
                "podward-housekeeper",
                [
                    "--socket",
                    &s(&paths.hk_sock),
                    "--shim-socket",
                    &s(&shim_sock),
                    "--prober-socket",
                    &s(&paths.prober_sock),
                    "--containerd-socket",
                    &containerd,
                    "--kubelet-root",
                    &s(&paths.kubelet_root),
                    "--log-root",
                    &s(&paths.log_root),
                    "--kubelet-cgroup-root",
                    node.cgroup_parent(),
                    "--interval",
                    HOUSEKEEPER_INTERVAL,
                    "--orphan-grace",
                    ORPHAN_GRACE,
                ]
                .into_iter()
                .chain(act)
                .map(str::to_owned)
                .collect(),
            ),
        ];
        let mut daemons = Vec::new();
        for ((name, mut flags), addr) in specs.into_iter().zip(&admin) {
            flags.extend(["--admin-addr".to_owned(), addr.clone()]);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let d = Daemon::spawn_with_output(name, &flags, DaemonOutput::Lines(tx.clone()))
                .await
                .with_context(|| format!("start {name}"))?;
            d.wait_healthy(addr.parse::<SocketAddr>()?, Duration::from_secs(30))
                .await
                .with_context(|| format!("{name} healthy"))?;
            daemons.push(d);
        }
        println!(
            "{} podward-shim (CRI relay, admin {}), podward-prober (node {NODE_NAME}, API server {}, admin {}), \
             podward-housekeeper ({}, every {HOUSEKEEPER_INTERVAL}, orphan grace {ORPHAN_GRACE}, admin {})",
            style.bold("== started"),
            admin[0],
            api.url(),
            admin[1],
            if args.act {
                "ACTING: --act"
            } else {
                "dry run: its default"
            },
            admin[2],
        );
        if !args.verbose {
            println!("   (their logs are hidden; --verbose shows them)");
        }
        let driver = Driver::connect(&paths.cri_sock)
            .await
            .context("connect to the shim")?;
        Ok(Stack {
            node,
            api,
            driver,
            paths,
            daemons,
            counts,
            printer,
        })
    }

    /// SIGTERMs the housekeeper and the prober and waits for them, leaving the shim. The demo
    /// deletes its pod after this, as kubelet stops a deleted pod's probe workers before it
    /// kills the containers: a probe kill racing the deletion would only be noise.
    pub(crate) async fn stop_watchers(&mut self) {
        while self.daemons.len() > 1 {
            if let Some(mut d) = self.daemons.pop()
                && let Err(e) = d.terminate().await
            {
                eprintln!("stopping a daemon: {e}");
            }
        }
    }

    /// SIGTERMs the daemons still running (housekeeper first, shim last) and waits for them; the
    /// number of warnings and errors they logged, and apart from those the warnings the demo
    /// causes on purpose. The node is removed when the stack is dropped.
    pub(crate) async fn stop(mut self) -> (u64, u64) {
        while let Some(mut d) = self.daemons.pop() {
            if let Err(e) = d.terminate().await {
                eprintln!("stopping a daemon: {e}");
            }
        }
        // The pipes close with the daemons; let the printer show their last lines.
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.printer).await;
        (
            self.counts.warnings.load(Ordering::Relaxed),
            self.counts.kills.load(Ordering::Relaxed),
        )
    }
}

/// Daemon log lines at WARN or ERROR, and the warnings the demo causes on purpose.
#[derive(Default)]
struct LogCounts {
    warnings: AtomicU64,
    kills: AtomicU64,
}

/// Prints daemon log lines: all of them with `--verbose`, else only warnings and errors that
/// the demo did not cause on purpose (the timeline shows those).
async fn print_logs(
    mut rx: mpsc::Receiver<(String, String)>,
    verbose: bool,
    counts: Arc<LogCounts>,
    style: Style,
) {
    while let Some((name, line)) = rx.recv().await {
        let level = term::level_of(&line);
        let kill = level == Level::Warn && term::is_expected_warning(&name, &line);
        if kill {
            counts.kills.fetch_add(1, Ordering::Relaxed);
        } else if level != Level::Other {
            counts.warnings.fetch_add(1, Ordering::Relaxed);
        }
        if verbose || (level != Level::Other && !kill) {
            let line = term::printable(&line, 2000);
            let text = format!("[{name}] {line}");
            eprintln!(
                "{}",
                match level {
                    Level::Other => style.dim(&text),
                    Level::Warn | Level::Error => style.yellow(&text),
                }
            );
        }
    }
}
