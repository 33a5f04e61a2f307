//! Readiness when the prober is gone, end to end: a real containerd, the real shim and
//! `podward-prober` daemon renewing its node lease at a short cadence (every 1 s, 4 s duration)
//! and a real `podward-prober sentinel` process, both talking to the API stand-in
//! ([`podward_e2e::apiserver::MockApiServer`], which serves Leases as kube-apiserver does):
//!
//! - a gated pod whose readiness probe succeeds is `podward.io/ready=True`;
//! - `kill -9` the prober and keep it down: the condition goes `False` (reason
//!   `ProberNotReporting`, the message naming the node) within lease duration + one sentinel
//!   period, with exactly one event;
//! - a gated pod on a node that never had a lease (podward not installed there) is untouched;
//! - the prober back: its fresh result takes the condition back to `True`, and nothing flaps
//!   after that (the sentinel writes nothing more).

#[path = "support/prober.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use podward_e2e::Daemon;
use podward_e2e::apiserver::{MockApiServer, Recorded};
use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

/// The prober's lease cadence here: renew every 1 s, 4 s duration.
const RENEW: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(4);
/// The sentinel's period here.
const PERIOD: Duration = Duration::from_secs(1);

/// The statuses pod `name`'s gate was written to after `since`, in order.
fn written(mock: &MockApiServer, name: &str, since: SystemTime) -> Vec<String> {
    mock.status_writes(name)
        .iter()
        .filter(|r| r.at >= since)
        .filter_map(|r: &Recorded| r.condition(GATE)?["status"].as_str().map(str::to_owned))
        .collect()
}

/// The sentinel's events about pod `name`.
fn sentinel_events(mock: &MockApiServer, name: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "Pod"
                && e["involvedObject"]["name"] == name
                && e["reason"] == "ProberNotReporting"
        })
        .collect()
}

/// `podward-prober status` as an operator runs it on the node (its node name and kubeconfig
/// from the flags): exit success, stdout.
async fn status(env: &Env, kubeconfig: &std::path::Path) -> (bool, String) {
    let out = tokio::process::Command::new(podward_e2e::bin_path("podward-prober"))
        .arg("--socket")
        .arg(&env.prober_socket)
        .args([
            "--node-name",
            NODE,
            "--lease-namespace",
            NAMESPACE,
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .arg("status")
        .output()
        .await
        .expect("run podward-prober status");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_prober_s_gated_pod_goes_false_then_its_fresh_result_takes_it_back() {
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    put_node(&mock);
    let mut env = Env::start_with(lease_prober_args(&kubeconfig)).await;
    let (mut sentinel, sentinel_admin) = spawn_sentinel(&kubeconfig).await;

    // A gated pod on a node podward is not installed on: no lease, ever.
    let mut stranger = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "elsewhere", "namespace": "default", "uid": "uid-elsewhere"},
        "spec": {"nodeName": "unleased-node", "readinessGates": [{"conditionType": GATE}],
                 "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": GATE, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    });
    mock.put_pod(stranger.take());

    // A gated pod whose HTTP readiness succeeds.
    let name = "served";
    let uid = ready_pod(&env, &mock, name, None).await;
    wait_until("the gate to be True", Duration::from_secs(60), || {
        gate(&mock, &uid)["status"] == "True"
    })
    .await;
    wait_until(
        "the node lease, held by the node",
        Duration::from_secs(30),
        || {
            mock.lease(NAMESPACE, NODE)
                .is_some_and(|l| l["spec"]["holderIdentity"] == NODE)
        },
    )
    .await;
    assert_eq!(
        mock.lease(NAMESPACE, NODE).expect("lease")["spec"]["leaseDurationSeconds"],
        4
    );
    wait_until(
        "the sentinel to lead and follow one lease",
        Duration::from_secs(30),
        || {
            mock.lease(NAMESPACE, "podward-sentinel")
                .is_some_and(|l| l["spec"]["holderIdentity"] == "sentinel-e2e")
        },
    )
    .await;
    until_async_leases(sentinel_admin).await;

    let (ok, out) = status(&env, &kubeconfig).await;
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "Node lease {NAMESPACE}/{NODE}: holder {NODE}, last renewal "
        )) && out.contains("duration 4s: current")
            && out.contains("leader sentinel-e2e, last renewal "),
        "{out}"
    );

    // kill -9, and the prober stays down.
    env.kill_prober().await;
    let killed = SystemTime::now();
    let killed_at = Instant::now();
    wait_until(
        "the sentinel to mark the gate False",
        LEASE + PERIOD + Duration::from_secs(3),
        || gate(&mock, &uid)["status"] == "False",
    )
    .await;
    let took = killed_at.elapsed();
    // The sentinel last saw a renewal at most one interval before the kill.
    assert!(
        took + RENEW >= LEASE,
        "marked before the lease expired: {took:?}"
    );
    assert!(
        took <= LEASE + PERIOD + Duration::from_secs(1),
        "marked {took:?} after the kill (bound: lease {LEASE:?} + period {PERIOD:?} + 1 s of slack)"
    );
    eprintln!("gate False {took:?} after kill -9 (lease {LEASE:?}, sentinel period {PERIOD:?})");
    let c = gate(&mock, &uid);
    assert_eq!(c["reason"], "ProberNotReporting", "{c}");
    assert!(
        c["message"].as_str().is_some_and(|m| m.contains(NODE)),
        "the message names the node: {c}"
    );
    wait_until("the sentinel's event", Duration::from_secs(5), || {
        !sentinel_events(&mock, name).is_empty()
    })
    .await;
    let ev = sentinel_events(&mock, name);
    assert_eq!(ev.len(), 1, "one event: {ev:?}");
    assert_eq!(ev[0]["type"], "Warning");

    // The prober is gone, `status` says so (exit 1) and still shows the leases.
    let (ok, out) = status(&env, &kubeconfig).await;
    assert!(!ok);
    assert!(
        out.contains("duration 4s: EXPIRED ") && out.contains("leader sentinel-e2e"),
        "{out}"
    );
    eprintln!("status with the prober down:\n{out}");

    // Back: the first fresh result takes the condition over.
    env.start_prober().await;
    wait_until("the prober's fresh True", Duration::from_secs(30), || {
        gate(&mock, &uid)["status"] == "True"
    })
    .await;
    let back_at = Instant::now();
    // Watch a lease duration and two periods more: nothing flaps, the sentinel writes no more.
    while back_at.elapsed() < LEASE + PERIOD * 2 {
        assert_eq!(
            gate(&mock, &uid)["status"],
            "True",
            "flapped after the prober came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        written(&mock, name, killed),
        ["False", "True"],
        "after the kill: the sentinel's False, then the prober's True, nothing else"
    );
    assert_eq!(sentinel_events(&mock, name).len(), 1, "still one event");

    // The node without a lease: never listed, never written.
    assert_eq!(gate(&mock, "uid-elsewhere")["status"], "True");
    assert!(mock.status_writes("elsewhere").is_empty());
    assert!(
        !mock.requests().iter().any(|r| r.path == "/api/v1/pods"
            && r.query
                .get("fieldSelector")
                .is_some_and(|f| f.contains("unleased-node"))),
        "the unleased node's pods were listed"
    );
    // Every list of a node's pods (the sentinel's marking, the prober's reflector) is served from
    // the API server's watch cache (`resourceVersion=0`), not a quorum read per node.
    let lists: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/api/v1/pods"
                && r.query.get("watch").is_none_or(|w| w != "true")
        })
        .collect();
    assert!(!lists.is_empty());
    for r in &lists {
        assert_eq!(
            r.query.get("resourceVersion").map(String::as_str),
            Some("0"),
            "a pod list not at resourceVersion=0 by {}: {:?}",
            r.user_agent,
            r.query
        );
    }
    sentinel.terminate().await.expect("sentinel stops");
}

/// The node lease's `renewTime` ("" without a lease).
fn renew_time(mock: &MockApiServer) -> String {
    mock.lease(NAMESPACE, NODE)
        .and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Watches the node lease for `span`: it must change at least every lease duration (so the
/// sentinel never sees it expire), and pod `name` must never be written `False`. Returns the
/// renewals seen.
async fn lease_holds(mock: &MockApiServer, name: &str, span: Duration, what: &str) -> usize {
    let start = Instant::now();
    let since = SystemTime::now();
    let mut last = renew_time(mock);
    let mut changed_at = Instant::now();
    let mut renewals = 0;
    while start.elapsed() < span {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = renew_time(mock);
        if now != last {
            last = now;
            changed_at = Instant::now();
            renewals += 1;
        }
        assert!(
            changed_at.elapsed() < LEASE,
            "{what}: the node lease was not renewed for {:?} (duration {LEASE:?})",
            changed_at.elapsed()
        );
        let w = written(mock, name, since);
        assert!(
            !w.iter().any(|s| s == "False"),
            "{what}: pod {name} was written False: {w:?}"
        );
    }
    renewals
}

/// A node whose prober and sentinel run against the stand-in, with gated pod `served` True and
/// gated pod `refused` (whose status writes an admission webhook refuses for good) wanting a
/// write; the served pod's UID.
async fn node_with_a_refused_pod(
    mock: &MockApiServer,
    kubeconfig: &std::path::Path,
) -> (Env, Daemon, String) {
    mock.refuse_status_writes(
        "default",
        "refused",
        403,
        "admission webhook \"deny.example.com\" denied the request: frozen namespace",
    );
    let env = Env::start_with(lease_prober_args(kubeconfig)).await;
    let (sentinel, sentinel_admin) = spawn_sentinel(kubeconfig).await;
    let uid = ready_pod(&env, mock, "served", None).await;
    // Its condition says False (from before): the prober wants True and is refused each time.
    ready_pod(&env, mock, "refused", Some("False")).await;
    wait_until("the gate to be True", Duration::from_secs(60), || {
        gate(mock, &uid)["status"] == "True"
    })
    .await;
    wait_until("a refused write", Duration::from_secs(30), || {
        mock.requests()
            .iter()
            .any(|r| r.is_status_write("refused") && r.code == Some(403))
    })
    .await;
    until_async_leases(sentinel_admin).await;
    (env, sentinel, uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_s_refused_writes_never_withdraw_the_node_lease() {
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    put_node(&mock);
    let (_env, mut sentinel, uid) = node_with_a_refused_pod(&mock, &kubeconfig).await;
    // The refused pod is that pod's problem: the lease holds, the other pod is untouched.
    let renewals = lease_holds(&mock, "served", LEASE * 3, "one pod's writes refused").await;
    assert!(renewals >= 6, "{renewals} renewals in {:?}", LEASE * 3);
    assert_eq!(gate(&mock, &uid)["status"], "True");
    let refused = mock
        .requests()
        .iter()
        .filter(|r| r.is_status_write("refused"))
        .count();
    assert!(refused >= 2, "the refused write is retried ({refused})");
    // What the lease says of it (`status` shows it beside the lease).
    let lease = mock.lease(NAMESPACE, NODE).expect("lease");
    let problems = lease["metadata"]["annotations"]["podward.io/prober-problems"]
        .as_str()
        .unwrap_or("");
    assert!(
        problems.contains("1 pod(s) whose readiness-gate write keeps failing"),
        "{lease}"
    );
    sentinel.terminate().await.expect("sentinel stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pod_watch_never_withdraws_the_node_lease() {
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    put_node(&mock);
    let env = Env::start_with(lease_prober_args(&kubeconfig)).await;
    let (mut sentinel, sentinel_admin) = spawn_sentinel(&kubeconfig).await;
    let uid = ready_pod(&env, &mock, "served", None).await;
    wait_until("the gate to be True", Duration::from_secs(60), || {
        gate(&mock, &uid)["status"] == "True"
    })
    .await;
    until_async_leases(sentinel_admin).await;
    // An API server restart: every watch breaks off, and for a moment every request is
    // answered 503 (kube-rs's re-watch fails: an error), then it serves again and kube-rs
    // resumes the watch from its resource version, without a relist.
    let watches = |mock: &MockApiServer| {
        mock.requests()
            .iter()
            .filter(|r| {
                r.path == "/api/v1/pods" && r.query.get("watch").is_some_and(|w| w == "true")
            })
            .count()
    };
    let before = watches(&mock);
    let lists = |mock: &MockApiServer| {
        mock.requests()
            .iter()
            .filter(|r| {
                r.path == "/api/v1/pods" && r.code == Some(200) && !r.query.contains_key("watch")
            })
            .count()
    };
    let listed = lists(&mock);
    mock.set_available(false);
    mock.drop_watches();
    wait_until("a refused re-watch", Duration::from_secs(10), || {
        mock.requests().iter().skip(before).any(|r| {
            r.path == "/api/v1/pods" && r.query.contains_key("watch") && r.code == Some(503)
        })
    })
    .await;
    mock.set_available(true);
    wait_until("the pod watch to resume", Duration::from_secs(10), || {
        mock.requests().iter().any(|r| {
            r.path == "/api/v1/pods" && r.query.contains_key("watch") && r.code == Some(200)
        }) && watches(&mock) > before + 1
    })
    .await;
    assert_eq!(lists(&mock), listed, "resumed without a relist");
    let renewals = lease_holds(&mock, "served", LEASE * 3, "the pod watch dropped").await;
    assert!(renewals >= 6, "{renewals} renewals in {:?}", LEASE * 3);
    assert_eq!(gate(&mock, &uid)["status"], "True");
    sentinel.terminate().await.expect("sentinel stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_prober_restarts_in_a_row_never_write_a_pod_false() {
    // A renewal every 4 s, 6 s duration: a restart (kill, start 3 s later) stays within the
    // lease only if the new prober renews at once on start, not an interval later.
    const LEASE_HERE: Duration = Duration::from_secs(6);
    let mock = MockApiServer::start().await.expect("mock API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig: PathBuf = mock.write_kubeconfig(dir.path()).expect("kubeconfig");
    put_node(&mock);
    let mut args = lease_prober_args(&kubeconfig);
    for (flag, value) in [
        ("--node-lease-renew-interval-seconds", "4"),
        ("--node-lease-duration-seconds", "6"),
    ] {
        let i = args.iter().position(|a| a == flag).expect("flag");
        args[i + 1] = value.to_owned();
    }
    let mut env = Env::start_with(args).await;
    let (mut sentinel, sentinel_admin) = spawn_sentinel(&kubeconfig).await;
    let uid = ready_pod(&env, &mock, "served", None).await;
    wait_until("the gate to be True", Duration::from_secs(60), || {
        gate(&mock, &uid)["status"] == "True"
    })
    .await;
    until_async_leases(sentinel_admin).await;
    let since = SystemTime::now();
    let mut renewed = renew_time(&mock);
    for round in 0..10 {
        env.kill_prober().await;
        let killed = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        env.start_prober().await;
        wait_until(
            &format!("round {round}: the restarted prober's first renewal"),
            Duration::from_secs(3),
            || renew_time(&mock) != renewed,
        )
        .await;
        renewed = renew_time(&mock);
        let gap = killed.elapsed();
        assert!(
            gap < LEASE_HERE,
            "round {round}: renewed {gap:?} after the kill"
        );
        let w = written(&mock, "served", since);
        assert!(
            !w.iter().any(|s| s == "False"),
            "round {round}: written False: {w:?}"
        );
    }
    // A period and a half more: the sentinel had every chance to see an expiry.
    tokio::time::sleep(PERIOD + PERIOD / 2).await;
    assert_eq!(written(&mock, "served", since), Vec::<String>::new());
    assert_eq!(gate(&mock, &uid)["status"], "True");
    sentinel.terminate().await.expect("sentinel stops");
}
