//! The node lease renewer at the HTTP boundary: it creates the lease when missing, owned by its
//! Node (uid from a read of the Node) and carrying the Node's zone, at once on start, and
//! replaces it with a new `renewTime` at every interval; it stops renewing while the pod source
//! is not read (alive but blind) and starts again when it is; a `409` as a real API server
//! answers it (the object has been modified) reads the lease again and writes on top of the new
//! version; any other failed update is tried again in the same renewal (kubelet's
//! `retryUpdateLease`), not an interval later.

#[path = "support/apiserver.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use podward_api::daemon::admin::Readiness;
use podward_prober::clock::Clock;
use podward_prober::kubernetes::lease::{LeaseMetrics, LeaseSettings, ProberHealth, Renewer};
use podward_prober::kubernetes::metrics::ApiMetrics;
use serde_json::{Value, json};
use support::*;
use tokio::sync::oneshot;

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/podward/leases";
const INTERVAL: Duration = Duration::from_millis(300);

fn settings() -> LeaseSettings {
    LeaseSettings {
        namespace: "podward".into(),
        node: "node-a".into(),
        renew_interval: INTERVAL,
        duration: Duration::from_secs(40),
        handover: None,
    }
}

/// A renewer with a healthy prober behind it (source read, pods synced, nothing pending); the
/// source's latch to break it.
fn start(client: kube::Client) -> (Readiness, LeaseMetrics, oneshot::Sender<()>) {
    let source = Readiness::default();
    source.set(true);
    let api = ApiMetrics::new(None).expect("metrics");
    api.synced.set(1);
    let metrics = LeaseMetrics::new(None).expect("metrics");
    let health = Arc::new(ProberHealth::new(
        source.clone(),
        api,
        Duration::from_secs(40),
    ));
    let renewer = Renewer::new(client, settings(), Clock::system(), metrics.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        renewer
            .run(&*health, async {
                let _ = stopped.await;
            })
            .await;
    });
    (source, metrics, stop)
}

/// The lease as the API server answers it after a write: `body` with a resource version.
fn stored(mut body: Value, rv: &str) -> Value {
    body["metadata"]["resourceVersion"] = json!(rv);
    body["metadata"]["uid"] = json!("lease-uid");
    body
}

/// Reads the node's zone (the Node, once per process), then creates the lease (GET 404,
/// POST) with that zone; answers the stored object.
async fn created(api: &mut ApiServer) -> Value {
    let node = api.next().await;
    assert_eq!(
        (node.method.as_str(), node.path.as_str()),
        ("GET", "/api/v1/nodes/node-a")
    );
    node.reply(
        200,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a",
               "uid": "node-a-uid", "labels": {"topology.kubernetes.io/zone": "zone-1"}}}),
    );
    let get = api.next().await;
    assert_eq!(
        (get.method.as_str(), get.path.as_str()),
        ("GET", &*format!("{PATH}/node-a"))
    );
    get.reply_status(
        404,
        "NotFound",
        "leases.coordination.k8s.io \"node-a\" not found",
        &[],
    );
    let post = api.next().await;
    assert_eq!((post.method.as_str(), post.path.as_str()), ("POST", PATH));
    let body = post.body.clone();
    assert_eq!(body["metadata"]["name"], "node-a");
    assert_eq!(body["metadata"]["labels"]["podward.io/node-lease"], "true");
    assert_eq!(
        body["metadata"]["labels"]["topology.kubernetes.io/zone"], "zone-1",
        "the node's zone, for the sentinel's per-zone rates"
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-a-uid"}]),
        "owned by its Node (kubelet's SetNodeOwnerFunc): deleted with it"
    );
    assert_eq!(body["spec"]["holderIdentity"], "node-a");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 40);
    assert!(body["spec"]["renewTime"].is_string(), "{body}");
    let s = stored(body, "1");
    post.reply(201, s.clone());
    s
}

#[tokio::test]
async fn creates_then_renews_with_the_resource_version_it_holds() {
    let (client, mut api) = mock();
    let (_source, metrics, _stop) = start(client);
    let first = created(&mut api).await;
    let mut rv = 1;
    let mut last_renew = first["spec"]["renewTime"]
        .as_str()
        .expect("time")
        .to_owned();
    for _ in 0..3 {
        let put = api.next().await;
        assert_eq!(
            (put.method.as_str(), put.path.as_str()),
            ("PUT", &*format!("{PATH}/node-a"))
        );
        assert_eq!(put.body["metadata"]["resourceVersion"], rv.to_string());
        let renew = put.body["spec"]["renewTime"]
            .as_str()
            .expect("time")
            .to_owned();
        assert!(renew > last_renew, "{renew} after {last_renew}");
        assert_eq!(put.body["spec"]["holderIdentity"], "node-a");
        rv += 1;
        last_renew = renew;
        let s = stored(put.body.clone(), &rv.to_string());
        put.reply(200, s);
    }
    // No read between renewals: the lease is kept from the last answer, as kubelet does.
    assert!(metrics.renewals.with_label_values(&["ok"]).get() >= 3);
}

#[tokio::test]
async fn alive_but_blind_stops_renewing_and_resumes_when_the_source_is_read_again() {
    let (client, mut api) = mock();
    let (source, metrics, _stop) = start(client);
    let first = created(&mut api).await;
    let put = api.next().await;
    assert_eq!(put.method, "PUT");
    let s = stored(put.body.clone(), "2");
    put.reply(200, s);
    // The pod source breaks (the shim's stream lost and containerd unreachable).
    source.set(false);
    // A renewal that was already under way may still arrive; after it, nothing.
    if let Ok(ex) = tokio::time::timeout(INTERVAL * 2, api.next()).await {
        ex.reply(200, stored(first.clone(), "3"));
    }
    api.quiet_for(INTERVAL * 5).await;
    assert!(metrics.renewals.with_label_values(&["skipped"]).get() >= 3);
    assert_eq!(metrics.healthy.get(), 0);
    // Read again: renewing again.
    source.set(true);
    let put = api.next().await;
    assert_eq!(put.method, "PUT");
    let s = stored(put.body.clone(), "4");
    put.reply(200, s);
    assert_eq!(metrics.healthy.get(), 1);
}

#[tokio::test]
async fn a_conflict_reads_the_lease_again_and_writes_on_the_new_version() {
    let (client, mut api) = mock();
    let (_source, metrics, _stop) = start(client);
    let first = created(&mut api).await;
    let put = api.next().await;
    assert_eq!(put.body["metadata"]["resourceVersion"], "1");
    // As kube-apiserver answers an update with a stale resourceVersion.
    put.reply_status(
        409,
        "Conflict",
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"node-a\": the object has been modified; please apply your changes to the latest version and try again",
        &[],
    );
    let get = api.next().await;
    assert_eq!(
        (get.method.as_str(), get.path.as_str()),
        ("GET", &*format!("{PATH}/node-a"))
    );
    // Someone else wrote it meanwhile (another holder, a newer version).
    let mut theirs = stored(first.clone(), "7");
    theirs["spec"]["holderIdentity"] = json!("node-b");
    theirs["spec"]["leaseTransitions"] = json!(3);
    get.reply(200, theirs);
    let put = api.next().await;
    assert_eq!(put.method, "PUT");
    assert_eq!(put.body["metadata"]["resourceVersion"], "7");
    assert_eq!(put.body["spec"]["holderIdentity"], "node-a");
    assert_eq!(put.body["spec"]["leaseTransitions"], 3);
    let s = stored(put.body.clone(), "8");
    put.reply(200, s);
    // The conflict did not count as a failed renewal: it was resolved in the same round.
    let next = api.next().await;
    assert_eq!(next.body["metadata"]["resourceVersion"], "8");
    assert_eq!(metrics.renewals.with_label_values(&["conflict"]).get(), 0);
    assert_eq!(metrics.renewals.with_label_values(&["error"]).get(), 0);
}

#[tokio::test]
async fn a_failed_update_is_tried_again_at_once_within_the_same_renewal() {
    let (client, mut api) = mock();
    let (_source, metrics, _stop) = start(client);
    created(&mut api).await;
    // kubelet's retryUpdateLease: a 500 (or a timeout) is tried again at once, up to 5 times.
    let started = tokio::time::Instant::now();
    for _ in 0..2 {
        let put = api.next().await;
        assert_eq!(put.method, "PUT");
        put.reply_status(500, "InternalError", "etcdserver: request timed out", &[]);
    }
    let put = api.next().await;
    assert_eq!(put.method, "PUT");
    assert_eq!(put.body["metadata"]["resourceVersion"], "1");
    let s = stored(put.body.clone(), "2");
    put.reply(200, s);
    assert!(
        started.elapsed() < INTERVAL * 2,
        "the tries came within one renewal: {:?}",
        started.elapsed()
    );
    let next = api.next().await;
    assert_eq!(next.body["metadata"]["resourceVersion"], "2");
    assert_eq!(metrics.renewals.with_label_values(&["error"]).get(), 0);
}

/// A renewer with the hand-over set; `stop` ends its loop as SIGTERM does.
fn start_with_handover(
    client: kube::Client,
    handover: Duration,
) -> (
    Readiness,
    LeaseMetrics,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let source = Readiness::default();
    source.set(true);
    let api = ApiMetrics::new(None).expect("metrics");
    api.synced.set(1);
    let metrics = LeaseMetrics::new(None).expect("metrics");
    let health = Arc::new(ProberHealth::new(
        source.clone(),
        api,
        Duration::from_secs(40),
    ));
    let renewer = Renewer::new(client, settings(), Clock::system(), metrics.clone())
        .with_handover(Some(handover));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        renewer
            .run(&*health, async {
                let _ = stopped.await;
            })
            .await;
    });
    (source, metrics, stop, task)
}

#[tokio::test]
async fn a_stopping_prober_hands_its_lease_over_for_the_replacement() {
    let (client, mut api) = mock();
    let (_source, metrics, stop, task) = start_with_handover(client, Duration::from_secs(120));
    let first = created(&mut api).await;
    assert_eq!(
        first["spec"]["leaseDurationSeconds"], 40,
        "the normal duration"
    );
    // Stopped once that renewal is done (a prober stopped before it ever renewed has nothing
    // to hand over).
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    while metrics.renewals.with_label_values(&["ok"]).get() == 0 {
        assert!(
            tokio::time::Instant::now() < end,
            "the first renewal never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    // The last renewal: the hand-over's duration, on the version it holds.
    let put = api.next().await;
    assert_eq!(put.method, "PUT");
    assert_eq!(put.body["metadata"]["resourceVersion"], "1");
    assert_eq!(put.body["spec"]["leaseDurationSeconds"], 120);
    let s = stored(put.body.clone(), "2");
    put.reply(200, s);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the renewer ends after the hand-over")
        .expect("join");
    assert_eq!(metrics.renewals.with_label_values(&["handover"]).get(), 1);
    api.quiet_for(INTERVAL * 3).await;
}

#[tokio::test]
async fn a_blind_prober_hands_nothing_over() {
    let (client, mut api) = mock();
    let (source, metrics, stop, task) = start_with_handover(client, Duration::from_secs(120));
    let first = created(&mut api).await;
    source.set(false);
    if let Ok(ex) = tokio::time::timeout(INTERVAL * 2, api.next()).await {
        ex.reply(200, stored(first.clone(), "2"));
    }
    api.quiet_for(INTERVAL * 2).await;
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the renewer ends")
        .expect("join");
    api.quiet_for(INTERVAL * 2).await;
    assert_eq!(metrics.renewals.with_label_values(&["handover"]).get(), 0);
}
