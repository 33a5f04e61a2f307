//! The readiness-gate writer at the HTTP boundary: the exact server-side apply request, zero
//! writes in steady state and after a restart, `lastTransitionTime` only on a status change,
//! `409`, `422` (a UID that is not the pod's, as a real API server answers it), `429` with
//! `Retry-After`, a dropped connection, `404`, and the QPS limit.

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/readiness.rs"]
mod readiness;

use std::sync::Arc;
use std::time::Duration;

use apiserver::*;
use podward_prober::clock::Clock;
use podward_prober::kubernetes::gate::{Gate, KubeWriter};
use podward_prober::kubernetes::limit::{RateLimitLayer, TokenBucket};
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::model::api_pod::{
    ApiPod, ConditionStatus, GateCondition, PodPhase, RestartPolicy,
};
use podward_prober::pods::view::readiness::PodReadiness;
use readiness::Scripted;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::Layer;

/// The clock's wall time at start: 2027-01-15T08:00:00Z.
const T0_NS: i64 = 1_800_000_000 * 1_000_000_000;
const T0: &str = "2027-01-15T08:00:00Z";
const EARLIER: &str = "2026-11-23T09:00:00Z";

fn not_ready(container: &str, output: &str) -> PodReadiness {
    PodReadiness::NotReady {
        container: container.into(),
        reason: "ReadinessProbeFailed",
        message: format!("container {container}: Readiness probe failed: {output}"),
    }
}

struct Setup {
    gate: Gate,
    source: Arc<Scripted>,
    metrics: ApiMetrics,
    stop: Option<oneshot::Sender<()>>,
}

impl Setup {
    fn new(client: kube::Client) -> Setup {
        let metrics = ApiMetrics::new(None).expect("metrics");
        let gate = Gate::new("podward.io/ready", metrics.clone());
        let source = Arc::new(Scripted::default());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(gate.clone().run(
            Arc::new(KubeWriter::new(client)),
            source.clone(),
            Clock::starting_at(T0_NS),
            async {
                let _ = stopped.await;
            },
        ));
        Setup {
            gate,
            source,
            metrics,
            stop: Some(stop),
        }
    }

    fn set(&self, uid: &str, r: PodReadiness) {
        self.source.0.lock().insert(uid.into(), r);
        self.gate.touch(uid);
    }

    fn writes(&self, result: &str) -> u64 {
        self.metrics.gate_writes.with_label_values(&[result]).get()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The reflector's view of gated pod `name` (uid `u-<name>`) at `rv` with `condition`.
fn seen(name: &str, rv: &str, condition: Option<GateCondition>) -> ApiPod {
    ApiPod {
        uid: format!("u-{name}"),
        namespace: "shop".into(),
        name: name.into(),
        resource_version: rv.into(),
        restart_policy: RestartPolicy::Always,
        phase: PodPhase::Running,
        deleting: false,
        grace_seconds: Some(30),
        deletion_grace_seconds: None,
        probes_annotation: None,
        gated: true,
        condition,
        containers: Vec::new(),
    }
}

fn cond(status: ConditionStatus, reason: &str, message: &str, ltt: &str) -> GateCondition {
    GateCondition {
        status,
        reason: reason.into(),
        message: message.into(),
        last_transition_time: ltt.into(),
    }
}

/// The pod the API server answers a write with.
fn written(name: &str, rv: &str) -> serde_json::Value {
    pod(name, &format!("u-{name}"), rv, true, None)
}

#[tokio::test]
async fn a_readiness_change_is_one_server_side_apply_of_that_condition_alone_and_nothing_more() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source.0.lock().insert(
        "u-web".into(),
        not_ready("app", "HTTP probe failed with statuscode: 500"),
    );
    s.gate.api_pod(&seen(
        "web",
        "10",
        Some(cond(ConditionStatus::True, "", "", EARLIER)),
    ));

    let w = api.next().await;
    assert_eq!(w.method, "PATCH");
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/web/status");
    assert_eq!(
        w.query,
        [("fieldManager", "podward-prober"), ("force", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    );
    assert_eq!(w.content_type, "application/apply-patch+yaml");
    assert_eq!(
        w.body,
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-web"},
            "status": {"conditions": [{
                "type": "podward.io/ready",
                "status": "False",
                "reason": "ReadinessProbeFailed",
                "message": "container app: Readiness probe failed: HTTP probe failed with statuscode: 500",
                "lastTransitionTime": T0,
            }]}
        })
    );
    w.reply(200, written("web", "11"));

    // Steady: more changes that say the same, the reflector's stale view from before the write,
    // and its fresh one after it: no write.
    for _ in 0..5 {
        s.set(
            "u-web",
            not_ready("app", "HTTP probe failed with statuscode: 503"),
        );
    }
    s.gate.api_pod(&seen(
        "web",
        "10",
        Some(cond(ConditionStatus::True, "", "", EARLIER)),
    ));
    s.gate.api_pod(&seen(
        "web",
        "11",
        Some(cond(
            ConditionStatus::False,
            "ReadinessProbeFailed",
            "container app: Readiness probe failed: x",
            T0,
        )),
    ));
    api.quiet_for(Duration::from_millis(1500)).await;
    assert_eq!(s.writes("ok"), 1);
}

#[tokio::test]
async fn unknown_or_unprobed_readiness_and_ungated_pods_are_never_written() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-a".into(), PodReadiness::Unknown);
    s.gate.api_pod(&seen(
        "a",
        "1",
        Some(cond(ConditionStatus::False, "R", "container x: m", EARLIER)),
    ));
    s.gate.api_pod(&seen("b", "1", None)); // NotProbed
    let mut ungated = seen("c", "1", None);
    ungated.gated = false;
    s.source.0.lock().insert("u-c".into(), PodReadiness::Ready);
    s.gate.api_pod(&ungated);
    s.gate.touch("u-c");
    api.quiet_for(Duration::from_millis(1500)).await;
}

#[tokio::test]
async fn last_transition_time_stays_while_the_status_does_and_moves_with_it() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), not_ready("db", "refused"));
    s.gate.api_pod(&seen(
        "web",
        "10",
        Some(cond(
            ConditionStatus::False,
            "ReadinessProbeFailed",
            "container app: old",
            EARLIER,
        )),
    ));
    let w = api.next().await;
    let c = &w.body["status"]["conditions"][0];
    assert_eq!(
        c["message"], "container db: Readiness probe failed: refused",
        "another container now"
    );
    assert_eq!(
        c["lastTransitionTime"], EARLIER,
        "still False: the transition time stays"
    );
    w.reply(200, written("web", "11"));

    s.set("u-web", PodReadiness::Ready);
    let w = api.next().await;
    let c = &w.body["status"]["conditions"][0];
    assert_eq!(
        c.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec![
            "lastTransitionTime".to_owned(),
            "status".to_owned(),
            "type".to_owned()
        ]),
        "True carries no reason or message (applying drops the old ones)"
    );
    assert_eq!(
        (c["status"].as_str(), c["lastTransitionTime"].as_str()),
        (Some("True"), Some(T0))
    );
    w.reply(200, written("web", "12"));
    api.quiet_for(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn a_409_conflict_is_retried_after_a_backoff_with_the_latest_readiness() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), not_ready("app", "x"));
    s.gate.api_pod(&seen("web", "10", None));
    let w = api.next().await;
    assert_eq!(w.body["status"]["conditions"][0]["status"], "False");
    let t = Instant::now();
    w.reply_status(
        409,
        "Conflict",
        "Operation cannot be fulfilled on pods \"web\": the object has been modified; please apply your changes to the latest version and try again",
        &[],
    );
    // Meanwhile the container became ready: the retry carries the latest readiness.
    s.set("u-web", PodReadiness::Ready);
    let w = api.next().await;
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "backoff: {:?}",
        t.elapsed()
    );
    assert_eq!(w.body["status"]["conditions"][0]["status"], "True");
    w.reply(200, written("web", "11"));
    api.quiet_for(Duration::from_millis(500)).await;
    assert_eq!((s.writes("conflict"), s.writes("ok")), (1, 1));
}

#[tokio::test]
async fn a_429_holds_the_write_for_the_servers_retry_after() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), PodReadiness::Ready);
    s.gate.api_pod(&seen("web", "10", None));
    let w = api.next().await;
    let t = Instant::now();
    w.reply_status(
        429,
        "TooManyRequests",
        "the server has received too many requests",
        &[("Retry-After", "2")],
    );
    let w = api.next().await;
    assert!(
        t.elapsed() >= Duration::from_millis(1900),
        "retried after {:?}",
        t.elapsed()
    );
    w.reply(200, written("web", "11"));
    api.quiet_for(Duration::from_millis(500)).await;
    assert_eq!((s.writes("throttled"), s.writes("ok")), (1, 1));
}

#[tokio::test]
async fn a_dropped_connection_during_a_write_is_retried_and_a_404_is_not() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), PodReadiness::Ready);
    s.gate.api_pod(&seen("web", "10", None));
    api.next().await.drop_connection();
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/web/status");
    w.reply_status(404, "NotFound", "pods \"web\" not found", &[]);
    api.quiet_for(Duration::from_millis(1500)).await;
    assert_eq!((s.writes("error"), s.writes("gone")), (1, 1));
}

#[tokio::test]
async fn after_a_restart_nothing_changes_until_a_real_result_differs_in_both_directions() {
    let (client, mut api) = mock();
    // A fresh gate is a restarted prober: it learns the conditions from the reflector.
    let s = Setup::new(client);
    for (name, st, reason, message) in [
        ("ready", ConditionStatus::True, "", ""),
        (
            "unready",
            ConditionStatus::False,
            "ReadinessProbeFailed",
            "container app: Readiness probe failed: 500",
        ),
    ] {
        s.source
            .0
            .lock()
            .insert(format!("u-{name}"), PodReadiness::Unknown);
        s.gate
            .api_pod(&seen(name, "10", Some(cond(st, reason, message, EARLIER))));
    }
    api.quiet_for(Duration::from_millis(1000)).await;
    // First results after the restart that say what the API already says: still nothing.
    s.set("u-ready", PodReadiness::Ready);
    s.set(
        "u-unready",
        not_ready("app", "HTTP probe failed with statuscode: 503"),
    );
    api.quiet_for(Duration::from_millis(1000)).await;
    // Results that differ: one write each.
    s.set("u-ready", not_ready("app", "refused"));
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/ready/status");
    assert_eq!(w.body["status"]["conditions"][0]["status"], "False");
    w.reply(200, written("ready", "11"));
    s.set("u-unready", PodReadiness::Ready);
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/unready/status");
    assert_eq!(w.body["status"]["conditions"][0]["status"], "True");
    w.reply(200, written("unready", "12"));
    api.quiet_for(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn writes_never_exceed_the_qps_limit_and_a_burst_of_changes_is_coalesced_per_pod() {
    let (svc, handle) =
        tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<RespBody>>();
    let bucket = Arc::new(TokenBucket::new(5.0, 2));
    let client = kube::Client::new(RateLimitLayer::new(bucket).layer(svc), "default");
    let mut api = ApiServer::from_handle(handle);
    let s = Setup::new(client);
    for i in 0..12 {
        let name = format!("p{i}");
        s.source
            .0
            .lock()
            .insert(format!("u-{name}"), PodReadiness::Ready);
        s.gate.api_pod(&seen(&name, "10", None));
        // Flapping before its write: coalesced into one.
        for _ in 0..3 {
            s.set(&format!("u-{name}"), not_ready("app", "x"));
            s.set(&format!("u-{name}"), PodReadiness::Ready);
        }
    }
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..12 {
        let w = api.next().await;
        at.push(start.elapsed());
        let name = w
            .path
            .trim_start_matches("/api/v1/namespaces/shop/pods/")
            .trim_end_matches("/status")
            .to_owned();
        w.reply(200, written(&name, "11"));
    }
    api.quiet_for(Duration::from_millis(700)).await;
    // Burst 2, then one every 200 ms: the 12th no earlier than 2 s after the first.
    assert!(at[11] >= Duration::from_millis(1900), "{at:?}");
    for (i, t) in at.iter().enumerate() {
        let allowed =
            Duration::from_millis(200) * u32::try_from(i.saturating_sub(2) + 1).expect("small");
        assert!(
            i < 2 || *t + Duration::from_millis(150) >= allowed,
            "write {i} at {t:?}: {at:?}"
        );
    }
    assert_eq!(s.writes("ok"), 12, "one write per pod");
}

#[tokio::test]
async fn a_422_refusing_the_uid_is_another_pod_under_the_name_and_the_write_is_dropped() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), not_ready("app", "x"));
    s.gate.api_pod(&seen("web", "10", None));
    let w = api.next().await;
    assert_eq!(w.body["metadata"]["uid"], "u-web");
    // What a real API server answers when `web` was re-created (uid u-new): the uid in the
    // apply body is immutable.
    let mut st = status(
        422,
        "Invalid",
        "Pod \"web\" is invalid: metadata.uid: Invalid value: \"u-web\": field is immutable",
        json!({"name": "web", "kind": "pods", "causes": [{"reason": "FieldValueInvalid",
            "message": "Invalid value: \"u-web\": field is immutable", "field": "metadata.uid"}]}),
    );
    st["status"] = json!("Failure");
    w.reply(422, st);
    api.quiet_for(Duration::from_millis(1500)).await;
    assert_eq!((s.writes("gone"), s.writes("error")), (1, 0));

    // The new pod under the name is another pod: written on its own, with its own uid.
    s.source
        .0
        .lock()
        .insert("u-new".into(), not_ready("app", "y"));
    let mut new = seen("web", "20", None);
    new.uid = "u-new".into();
    s.gate.api_gone("u-web");
    s.gate.api_pod(&new);
    let w = api.next().await;
    assert_eq!(w.body["metadata"]["uid"], "u-new");
    w.reply(200, written("web", "21"));
}

#[tokio::test]
async fn another_422_is_not_retried() {
    let (client, mut api) = mock();
    let s = Setup::new(client);
    s.source
        .0
        .lock()
        .insert("u-web".into(), PodReadiness::Ready);
    s.gate.api_pod(&seen("web", "10", None));
    api.next().await.reply_status(
        422,
        "Invalid",
        "Pod \"web\" is invalid: status.conditions[0].type: Invalid value",
        &[],
    );
    api.quiet_for(Duration::from_millis(1500)).await;
    assert_eq!((s.writes("invalid"), s.writes("error")), (1, 0));
}

#[tokio::test]
async fn the_sentinels_false_waits_until_this_prober_vouches_for_its_node_again() {
    use podward_prober::kubernetes::vouch::Vouch;
    let (client, mut api) = mock();
    let metrics = ApiMetrics::new(None).expect("metrics");
    let gate = Gate::new("podward.io/ready", metrics.clone());
    let vouch = Vouch::new(Duration::from_secs(40));
    gate.set_vouch(vouch.clone());
    let source = Arc::new(Scripted::default());
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(gate.clone().run(
        Arc::new(KubeWriter::new(client)),
        source.clone(),
        Clock::starting_at(T0_NS),
        async {
            let _ = stopped.await;
        },
    ));
    // The sentinel marked the pod while this prober was gone; the prober is back, its probe
    // says ready, but its node lease is not renewed yet.
    source.0.lock().insert("u-web".into(), PodReadiness::Ready);
    source.0.lock().insert("u-own".into(), PodReadiness::Ready);
    gate.api_pod(&seen(
        "web",
        "10",
        Some(cond(
            ConditionStatus::False,
            "ProberNotReporting",
            "podward-prober on node n stopped renewing its lease",
            EARLIER,
        )),
    ));
    // A pod with a False of its own (not the sentinel's) is written as usual.
    gate.api_pod(&seen(
        "own",
        "10",
        Some(cond(
            ConditionStatus::False,
            "ReadinessProbeFailed",
            "container app: Readiness probe failed: x",
            EARLIER,
        )),
    ));
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/own/status");
    w.reply(200, written("own", "11"));
    api.quiet_for(Duration::from_millis(800)).await;
    // Renewed: it vouches again, and takes the pod back at once.
    vouch.renewed();
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/shop/pods/web/status");
    assert_eq!(w.body["status"]["conditions"][0]["status"], "True");
    w.reply(200, written("web", "12"));
}
