//! Upgrades that change nothing a Service sees, end to end: a real containerd, the real shim,
//! `podward-prober` renewing its node lease (every 1 s, 4 s duration) and a real
//! `podward-prober sentinel`, against the API stand-in, with a gated pod whose readiness
//! probe succeeds (`podward.io/ready=True`):
//!
//! - the shim restarted (SIGTERM, a new one on the same sockets, which reaches containerd only
//!   3 s later) under the running prober: the prober keeps its workers (no result change on its
//!   Watch, the readiness worker's transition time and probe count carry on), the gate is never
//!   written and no event is emitted;
//! - the prober replaced as a DaemonSet rollout replaces it (SIGTERM, a replacement's delay of
//!   twice the lease duration, a new prober): the old one hands its lease over, the sentinel
//!   never marks the node, the pod is never written `False`, no event.

#[path = "support/prober.rs"]
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use podward_api::prober::v1 as api;
use podward_e2e::apiserver::MockApiServer;
use podward_e2e::{Daemon, free_port};
use serde_json::Value;
use support::*;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(4);
const PERIOD: Duration = Duration::from_secs(1);

/// Every status written to pod `name`'s gate after `since`.
fn written(mock: &MockApiServer, name: &str, since: SystemTime) -> Vec<String> {
    mock.status_writes(name)
        .iter()
        .filter(|r| r.at >= since)
        .map(|r| {
            r.condition(GATE)
                .and_then(|c| c["status"].as_str())
                .unwrap_or("(no gate)")
                .to_owned()
        })
        .collect()
}

/// Events about pod `name` (any reason: the sentinel's, the prober's).
fn pod_events(mock: &MockApiServer, name: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

fn lease_duration(mock: &MockApiServer) -> Option<i64> {
    mock.lease(NAMESPACE, NODE)?["spec"]["leaseDurationSeconds"].as_i64()
}

/// A node (lease every 1 s, 4 s duration, `extra` prober flags) with the sentinel running and
/// gated pod `served` True; its UID.
async fn node(mock: &MockApiServer, kubeconfig: &Path, extra: &[&str]) -> (Env, Daemon, String) {
    put_node(mock);
    let mut args = lease_prober_args(kubeconfig);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let env = Env::start_with(args).await;
    let uid = ready_pod(&env, mock, "served", None).await;
    wait_until("the gate to be True", Duration::from_secs(60), || {
        gate(mock, &uid)["status"] == "True"
    })
    .await;
    let (sentinel, admin) = spawn_sentinel(kubeconfig).await;
    until_async_leases(admin).await;
    (env, sentinel, uid)
}

/// The readiness probe's status of the served pod's container.
async fn readiness(env: &Env, uid: &str) -> api::ProbeStatus {
    let c = env
        .container(uid, "app")
        .await
        .expect("the container's status");
    assert!(c.ready, "{c:?}");
    c.probes
        .into_iter()
        .find(|p| p.r#type == api::ProbeType::Readiness as i32)
        .expect("a readiness probe")
}

/// Collects every event of the prober's Watch about pod `uid` until the stream ends.
async fn record_watch(env: &Env, uid: &str) -> Arc<Mutex<Vec<api::ProbeEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = env
        .client()
        .await
        .watch(api::WatchRequest {
            pod_uid: uid.to_owned(),
        })
        .await
        .expect("prober Watch")
        .into_inner();
    let out = seen.clone();
    tokio::spawn(async move {
        while let Ok(Some(ev)) = stream.message().await {
            out.lock().expect("lock").push(ev);
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_restart_under_a_running_prober_changes_no_readiness_and_writes_nothing() {
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    let (mut env, mut sentinel, uid) = node(&mock, &kubeconfig, &[]).await;
    let before = readiness(&env, &uid).await;
    let changes = record_watch(&env, &uid).await;
    let since = SystemTime::now();

    // The shim restarted as `install-shim.sh --restart` does: SIGTERM, a new one on the same
    // sockets. The new one reaches containerd only 3 s after its start (containerd slow to
    // answer, restarted with it on a node upgrade): its index stays empty that long, while the
    // prober is already back on its control socket.
    let status = env.shim.terminate().await.expect("the shim stops");
    assert!(status.success(), "the shim's SIGTERM exit: {status:?}");
    let dir_path = env.node.dir().to_owned();
    let late = dir_path.join("containerd-late.sock");
    let shim_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let s = |p: PathBuf| p.to_str().expect("utf8").to_owned();
    env.shim = Daemon::spawn(
        "podward-shim",
        &[
            "--listen",
            &s(dir_path.join("shim.cri.sock")),
            "--control-socket",
            &s(dir_path.join("shim.ctl.sock")),
            "--containerd-socket",
            &s(late.clone()),
            "--admin-addr",
            &shim_admin.to_string(),
        ],
    )
    .await
    .expect("spawn the new shim");
    env.shim
        .wait_healthy(shim_admin, Duration::from_secs(30))
        .await
        .expect("the new shim serving");
    // The scenario's delay, not a synchronisation: containerd appears 3 s later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    std::os::unix::fs::symlink(env.node.containerd_socket(), &late).expect("containerd back");
    env.shim
        .wait_ready(shim_admin, Duration::from_secs(60))
        .await
        .expect("the new shim ready");
    // The prober follows the new shim (its one subscriber), then a lease duration and two
    // sentinel periods more: time for any drop, re-add or write to show.
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape(shim_admin).await.unwrap_or_default();
        if sample(&m, &["podward_shim_subscribers "]) == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < end,
            "the prober never followed the new shim: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(LEASE + PERIOD * 2).await;

    let after = readiness(&env, &uid).await;
    assert_eq!(
        after.last_transition_at_ns, before.last_transition_at_ns,
        "the readiness result changed across the shim's restart: {before:?} -> {after:?}"
    );
    assert!(
        after.probes_run > before.probes_run,
        "the readiness worker was replaced (its probe count restarted): {before:?} -> {after:?}"
    );
    let seen = changes.lock().expect("lock").clone();
    assert!(seen.is_empty(), "the prober published changes: {seen:?}");
    assert_eq!(gate(&mock, &uid)["status"], "True");
    assert_eq!(written(&mock, "served", since), Vec::<String>::new());
    assert_eq!(pod_events(&mock, "served"), Vec::<Value>::new());
    sentinel.terminate().await.expect("sentinel stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prober_replaced_by_sigterm_hands_its_lease_over_and_no_pod_is_written_false() {
    // A replacement's delay of twice the lease duration: without a hand-over the sentinel
    // marks the node in it.
    const DELAY: Duration = Duration::from_secs(8);
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    let (mut env, mut sentinel, uid) =
        node(&mock, &kubeconfig, &["--node-lease-handover-seconds", "30"]).await;
    assert_eq!(lease_duration(&mock), Some(4));
    let since = SystemTime::now();

    let status = env.prober.terminate().await.expect("the prober stops");
    assert!(status.success(), "the prober's SIGTERM exit: {status:?}");
    assert_eq!(
        lease_duration(&mock),
        Some(30),
        "the stopping prober renewed its lease for the hand-over"
    );
    let stopped = Instant::now();
    while stopped.elapsed() < DELAY {
        let w = written(&mock, "served", since);
        assert!(
            w.is_empty(),
            "written while the prober was being replaced: {w:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.start_prober().await;
    wait_until(
        "the replacement's own renewal",
        Duration::from_secs(10),
        || lease_duration(&mock) == Some(4),
    )
    .await;
    let back = Instant::now();
    while back.elapsed() < LEASE + PERIOD * 2 {
        assert_eq!(gate(&mock, &uid)["status"], "True");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(written(&mock, "served", since), Vec::<String>::new());
    assert_eq!(pod_events(&mock, "served"), Vec::<Value>::new());
    sentinel.terminate().await.expect("sentinel stops");
}
