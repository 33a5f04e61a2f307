//! The plan says what the daemon will do: against a daemon that acts, `plan`'s header and
//! `--json` say so; against one in dry run, they say dry run. And the binary is in dry run unless
//! started with `--act` (or `--dry-run=false`): as safe as the chart's default.

#[path = "support/fake.rs"]
mod fake;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, U1, planned, reconciler};
use podward_api::housekeeper::v1::StatusRequest;
use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::housekeeper::v1::housekeeper_server::HousekeeperServer;
use podward_api::test_util::eventually;
use podward_housekeeper::Config;
use podward_housekeeper::reconcile::{Mode, Reconciler};
use podward_housekeeper::report::plan_command;
use podward_housekeeper::service::Service;
use tokio_stream::wrappers::UnixListenerStream;

/// Serves the API of `r` (a daemon whose own mode is `dry_run`) on a socket under the node.
fn serve(
    node: &FakeNode,
    r: Arc<Reconciler<FakeNode, RecordingActuator>>,
    dry_run: bool,
) -> (Config, tokio::task::JoinHandle<()>) {
    let socket = node.root().join("housekeeper.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(HousekeeperServer::new(Service::new(r, dry_run)))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
    let config = Config {
        socket,
        ..Config::default()
    };
    (config, server)
}

/// `plan --json` against the daemon at `config.socket`, parsed.
async fn plan_json(config: &Config) -> serde_json::Value {
    let text = plan_command(config, true, false)
        .await
        .expect("plan --json");
    serde_json::from_str(&text).expect("json")
}

fn header(table: &str) -> &str {
    table.lines().next().expect("a header line")
}

#[tokio::test]
async fn plan_against_an_acting_daemon_says_it_acts_in_the_table_and_the_json() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let r = Arc::new(r);
    // One pass seen: the next one acts on U1.
    r.pass(Mode::Act).await;
    let (config, server) = serve(&node, r.clone(), false);

    let table = plan_command(&config, false, false).await.expect("plan");
    assert!(
        !header(&table).contains("dry run"),
        "an acting daemon's plan must not say dry run:\n{table}"
    );
    assert!(header(&table).contains("ACTS"), "{table}");
    let json = plan_json(&config).await;
    assert_eq!(json["dry_run"], false, "{json}");
    assert_eq!(
        json["actions"].as_array().map(Vec::len),
        Some(3),
        "cgroup, pod dir and log dir of U1: {json}"
    );

    // And the daemon's next pass does act on what the plan listed.
    let (done, _) = r.pass(Mode::Act).await;
    assert!(!done.dry_run);
    assert_eq!(act.calls(), planned(&done));
    assert_eq!(act.calls().len(), 3);
    server.abort();
}

#[tokio::test]
async fn plan_against_a_dry_run_daemon_says_dry_run() {
    let node = FakeNode::new();
    node.leave_pod(U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let (config, server) = serve(&node, Arc::new(r), true);
    let table = plan_command(&config, false, false).await.expect("plan");
    assert!(header(&table).contains("dry run"), "{table}");
    assert!(!header(&table).contains("ACTS"), "{table}");
    let json = plan_json(&config).await;
    assert_eq!(json["dry_run"], true, "{json}");
    assert!(act.calls().is_empty());
    server.abort();
}

/// The daemon binary on temp roots, killed on drop. containerd is absent, so no pass can act
/// whatever the mode: these tests only read the mode the daemon runs in.
struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn housekeeper(dir: &Path, extra: &[&str]) -> Command {
    let p = |rel: &str| dir.join(rel).display().to_string();
    std::fs::create_dir_all(dir.join("kubelet/pods")).expect("kubelet root");
    std::fs::create_dir_all(dir.join("logs")).expect("log root");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_podward-housekeeper"));
    cmd.args([
        "--socket",
        &p("housekeeper.sock"),
        "--shim-socket",
        &p("shim.sock"),
        "--prober-socket",
        &p("prober.sock"),
        "--containerd-socket",
        &p("containerd.sock"),
        "--kubelet-root",
        &p("kubelet"),
        "--log-root",
        &p("logs"),
        "--admin-addr",
        "127.0.0.1:0",
        "--interval",
        "1h",
        "--log-level",
        "warn",
    ])
    .args(extra)
    .env_remove("PODWARD_HOUSEKEEPER_DRY_RUN")
    .env_remove("PODWARD_HOUSEKEEPER_ACT")
    .env_remove("PODWARD_HOUSEKEEPER_CONFIG");
    cmd
}

fn start(extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = housekeeper(dir.path(), extra).spawn().expect("spawn");
    Daemon {
        child,
        socket: dir.path().join("housekeeper.sock"),
        _dir: dir,
    }
}

/// The mode of the daemon's first pass (the timer's first tick runs at once), from `Status`.
async fn first_pass_dry_run(d: &mut Daemon) -> bool {
    let mut seen = None;
    eventually(
        "the daemon's first pass",
        Duration::from_secs(30),
        async || {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("the daemon exited: {status}");
            }
            let Ok(ch) = podward_api::socket::connect(d.socket.clone()).await else {
                return false;
            };
            let Ok(s) = HousekeeperClient::new(ch).status(StatusRequest {}).await else {
                return false;
            };
            seen = s.into_inner().last_pass.map(|p| p.dry_run);
            seen.is_some()
        },
    )
    .await;
    seen.expect("a pass")
}

#[tokio::test]
async fn the_daemon_is_in_dry_run_unless_started_with_act() {
    let mut default = start(&[]);
    assert!(
        first_pass_dry_run(&mut default).await,
        "started without --act, the daemon's passes must be dry runs"
    );
    let mut act = start(&["--act"]);
    assert!(!first_pass_dry_run(&mut act).await, "--act acts");
    let mut explicit = start(&["--dry-run=false"]);
    assert!(
        !first_pass_dry_run(&mut explicit).await,
        "--dry-run=false acts"
    );
    let mut dry = start(&["--dry-run"]);
    assert!(first_pass_dry_run(&mut dry).await);
}

#[test]
fn act_and_dry_run_together_are_refused_whether_flags_or_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (args, env) in [
        (&["--act", "--dry-run=true"][..], None),
        (
            &["--dry-run=true"][..],
            Some(("PODWARD_HOUSEKEEPER_ACT", "true")),
        ),
        (
            &["--act"][..],
            Some(("PODWARD_HOUSEKEEPER_DRY_RUN", "true")),
        ),
    ] {
        let mut cmd = housekeeper(dir.path(), args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("cannot be used with"),
            "{args:?} {env:?}: {}\n{stderr}",
            out.status
        );
    }
}
