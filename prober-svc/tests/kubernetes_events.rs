//! kubelet's events at the HTTP boundary, as client-go's recorder writes them: the exact objects,
//! the notes a user reads (a series per identical note, a new event per different note, a
//! combined event past ten similar ones), bounded retries, and what a full queue does.

#[path = "support/apiserver.rs"]
mod support;

use std::time::Duration;

use podward_prober::kubernetes::events::{self, EventQueue, QUEUE, RecorderConfig};
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::model::outcome::Outcome;
use podward_prober::model::outcome::ProbeResult;
use podward_prober::publish::event::{Event, EventKind, EventSink, killing_message};
use podward_prober::spec::ProbeType;
use serde_json::json;
use support::*;
use tokio::sync::oneshot;

fn event(kind: EventKind) -> Event {
    Event {
        pod_uid: "u-web".into(),
        pod_name: "web".into(),
        pod_namespace: "shop".into(),
        container_name: "app".into(),
        container_id: "c1".into(),
        init_container: false,
        probe: ProbeType::Liveness,
        at_ns: 1,
        kind,
    }
}

fn failed(output: &str) -> Event {
    event(EventKind::Probed(Outcome::Failure(output.into())))
}

fn involved() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "shop", "uid": "u-web",
           "fieldPath": "spec.containers{app}"})
}

const EVENTS: &str = "/api/v1/namespaces/shop/events";

/// A recorder over a mock API server that retries quickly.
fn recorder(retry_sleep: Duration) -> (EventQueue, ApiServer, ApiMetrics, oneshot::Sender<()>) {
    let (client, api) = mock();
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (queue, rx) = EventQueue::new(metrics.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let config = RecorderConfig {
        retry_sleep,
        ..RecorderConfig::new("node-a")
    };
    tokio::spawn(events::run(rx, client, config, metrics.clone(), async {
        let _ = stopped.await;
    }));
    (queue, api, metrics, stop)
}

/// Answers a create with the object, as the API server does, and returns its name.
fn created(ex: Exchange) -> String {
    assert_eq!((ex.method.as_str(), ex.path.as_str()), ("POST", EVENTS));
    let name = ex.body["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let body = ex.body.clone();
    ex.reply(201, body);
    name
}

#[tokio::test]
async fn liveness_then_readiness_failures_are_read_with_each_note_and_repeats_count_up() {
    let (queue, mut api, metrics, stop) = recorder(Duration::from_millis(10));
    queue.publish(&failed("HTTP probe failed with statuscode: 500"));
    queue.publish(&failed("HTTP probe failed with statuscode: 500"));
    let mut readiness = failed("dial tcp 10.0.0.7:8080: connect: connection refused");
    readiness.probe = ProbeType::Readiness;
    queue.publish(&readiness);
    queue.publish(&failed("HTTP probe failed with statuscode: 503"));
    queue.publish(&event(EventKind::Killing {
        message: killing_message("app", ProbeType::Liveness),
    }));
    // Result changes and kill records are not Kubernetes events.
    queue.publish(&event(EventKind::Result {
        result: ProbeResult::Failure,
        output: String::new(),
    }));

    let create = api.next().await;
    assert_eq!(create.content_type, "application/json");
    let b = &create.body;
    assert_eq!(
        (b["apiVersion"].as_str(), b["kind"].as_str()),
        (Some("v1"), Some("Event"))
    );
    assert_eq!(b["type"], "Warning");
    assert_eq!(b["reason"], "Unhealthy");
    assert_eq!(
        b["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    assert_eq!(b["count"], 1);
    assert_eq!(b["involvedObject"], involved());
    assert_eq!(
        b["source"],
        json!({"component": "podward-prober", "host": "node-a"})
    );
    assert_eq!(
        (
            b["reportingComponent"].as_str(),
            b["reportingInstance"].as_str()
        ),
        (Some("podward-prober"), Some("node-a"))
    );
    assert_eq!(b["metadata"]["namespace"], "shop");
    assert!(b["firstTimestamp"].is_string() && b["lastTimestamp"].is_string());
    let first = created(create);
    assert!(first.starts_with("web."), "{first}");

    // The identical note: the same object, count 2.
    let patch = api.next().await;
    assert_eq!(
        (patch.method.as_str(), patch.path.as_str()),
        ("PATCH", format!("{EVENTS}/{first}").as_str())
    );
    assert_eq!(patch.content_type, "application/strategic-merge-patch+json");
    assert_eq!(patch.body["count"], 2);
    assert_eq!(
        patch.body["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    assert!(patch.body["lastTimestamp"].is_string());
    patch.reply(200, json!({}));

    // A different note is a different event: the readiness failure is read as such.
    let ready = api.next().await;
    assert_eq!(
        ready.body["message"],
        "Readiness probe failed: dial tcp 10.0.0.7:8080: connect: connection refused"
    );
    assert_eq!(ready.body["count"], 1);
    assert_ne!(created(ready), first);
    let code = api.next().await;
    assert_eq!(
        code.body["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 503"
    );
    created(code);

    let kill = api.next().await;
    assert_eq!(kill.body["type"], "Normal");
    assert_eq!(kill.body["reason"], "Killing");
    assert_eq!(
        kill.body["message"],
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(kill.body["involvedObject"], involved());
    created(kill);
    api.quiet_for(Duration::from_millis(500)).await;
    assert_eq!(metrics.events.with_label_values(&["sent"]).get(), 5);
    let _ = stop.send(());
}

#[tokio::test]
async fn twelve_different_failure_messages_are_nine_events_and_one_combined_with_the_latest() {
    let (queue, mut api, _metrics, _stop) = recorder(Duration::from_millis(10));
    let msg = |i: usize| format!("HTTP probe failed with statuscode: {}", 500 + i);
    for i in 0..12 {
        queue.publish(&failed(&msg(i)));
    }
    let mut names = Vec::new();
    for i in 0..9 {
        let ex = api.next().await;
        assert_eq!(
            ex.body["message"],
            format!("Liveness probe failed: {}", msg(i))
        );
        names.push(created(ex));
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 9, "nine objects");
    let combined = api.next().await;
    assert_eq!(
        combined.body["message"],
        format!(
            "(combined from similar events): Liveness probe failed: {}",
            msg(9)
        )
    );
    assert_eq!(combined.body["count"], 1);
    let name = created(combined);
    for (count, i) in [(2, 10), (3, 11)] {
        let patch = api.next().await;
        assert_eq!(
            (patch.method.as_str(), patch.path.as_str()),
            ("PATCH", format!("{EVENTS}/{name}").as_str())
        );
        assert_eq!(patch.body["count"], count);
        assert_eq!(
            patch.body["message"],
            format!(
                "(combined from similar events): Liveness probe failed: {}",
                msg(i)
            ),
            "the combined event carries the latest note"
        );
        patch.reply(200, json!({}));
    }
    api.quiet_for(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn sidecars_are_named_by_their_init_container_path_and_notes_carry_kubelets_10_kib_of_output()
{
    let (queue, mut api, _metrics, _stop) = recorder(Duration::from_millis(10));
    // kubelet's probe output cap: its legacy (core v1) event carries all of it.
    let mut ev = failed(&"x".repeat(10_240));
    ev.init_container = true;
    ev.probe = ProbeType::Readiness;
    queue.publish(&ev);
    let create = api.next().await;
    assert_eq!(
        create.body["involvedObject"]["fieldPath"],
        "spec.initContainers{app}"
    );
    let note = create.body["message"].as_str().expect("message");
    assert_eq!(note.len(), "Readiness probe failed: ".len() + 10_240);
    assert!(note.starts_with("Readiness probe failed: xxx"));
    created(create);
    // Longer than kubelet could write: bounded.
    queue.publish(&failed(&"y".repeat(50_000)));
    let create = api.next().await;
    let note = create.body["message"].as_str().expect("message");
    assert_eq!(
        note.len(),
        podward_prober::kubernetes::events::MAX_NOTE_BYTES
    );
}

#[tokio::test]
async fn a_repeat_of_an_expired_event_is_created_anew_with_its_count() {
    let (queue, mut api, metrics, _stop) = recorder(Duration::from_millis(10));
    queue.publish(&failed("refused"));
    queue.publish(&failed("refused"));
    let name = created(api.next().await);
    let patch = api.next().await;
    assert_eq!(patch.method, "PATCH");
    patch.reply_status(404, "NotFound", "events \"x\" not found", &[]);
    let again = api.next().await;
    assert_eq!(again.method, "POST");
    assert_eq!(again.body["metadata"]["name"], name.as_str());
    assert_eq!(again.body["count"], 2);
    created(again);
    api.quiet_for(Duration::from_millis(300)).await;
    assert_eq!(metrics.events.with_label_values(&["sent"]).get(), 2);
}

#[tokio::test]
async fn failed_writes_are_tried_twelve_times_and_any_status_answer_only_once() {
    let (queue, mut api, metrics, _stop) = recorder(Duration::from_millis(5));
    queue.publish(&failed("a"));
    queue.publish(&failed("b"));
    queue.publish(&failed("c"));
    queue.publish(&failed("d"));
    for i in 0..12 {
        let ex = api.next().await;
        assert_eq!(ex.body["message"], "Liveness probe failed: a", "try {i}");
        ex.drop_connection();
    }
    // Given up after twelve tries; the next events follow, and a status answer is final, as in
    // client-go's recordToSink (a 5xx or 429 included).
    for (m, code, reason) in [
        ("b", 503, "ServiceUnavailable"),
        ("c", 429, "TooManyRequests"),
        ("d", 403, "Forbidden"),
    ] {
        let ex = api.next().await;
        assert_eq!(ex.body["message"], format!("Liveness probe failed: {m}"));
        ex.reply_status(code, reason, "no", &[]);
    }
    api.quiet_for(Duration::from_millis(300)).await;
    assert_eq!(metrics.events.with_label_values(&["failed"]).get(), 4);
}

#[tokio::test]
async fn with_the_api_down_a_full_queue_drops_without_ever_blocking_the_publisher() {
    let (queue, mut api, metrics, _stop) = recorder(Duration::from_secs(10));
    let t = std::time::Instant::now();
    for i in 0..(QUEUE + 500) {
        let mut ev = failed("refused");
        ev.pod_uid = format!("u-{i}"); // distinct objects: the spam filter lets each through
        queue.publish(&ev);
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "publishing never waits: {:?}",
        t.elapsed()
    );
    assert!(metrics.events.with_label_values(&["dropped"]).get() >= 400);
    api.next().await.drop_connection();
}

/// A server without core `v1` events (a `404` on the create, as an API server answers for a
/// resource it does not serve) gets `events.k8s.io/v1` events instead, from then on: nothing a
/// user would read is lost.
#[tokio::test]
async fn a_server_without_core_events_gets_events_k8s_io_ones() {
    const V1: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";
    let (queue, mut api, metrics, stop) = recorder(Duration::from_millis(10));
    queue.publish(&failed("HTTP probe failed with statuscode: 500"));
    queue.publish(&failed("HTTP probe failed with statuscode: 503"));

    let core = api.next().await;
    assert_eq!((core.method.as_str(), core.path.as_str()), ("POST", EVENTS));
    core.reply_status(
        404,
        "NotFound",
        "the server could not find the requested resource",
        &[],
    );
    for note in [
        "Liveness probe failed: HTTP probe failed with statuscode: 500",
        "Liveness probe failed: HTTP probe failed with statuscode: 503",
    ] {
        let ex = api.next().await;
        assert_eq!((ex.method.as_str(), ex.path.as_str()), ("POST", V1));
        assert_eq!(ex.body["note"], note);
        assert_eq!(ex.body["reason"], "Unhealthy");
        assert_eq!(ex.body["type"], "Warning");
        assert_eq!(ex.body["regarding"]["uid"], "u-web");
        assert_eq!(ex.body["reportingController"], "podward-prober");
        let body = ex.body.clone();
        ex.reply(201, body);
    }
    // The identical note again: its own series is bumped, on events.k8s.io/v1 too.
    queue.publish(&failed("HTTP probe failed with statuscode: 503"));
    let bump = api.next().await;
    assert_eq!(bump.method, "PATCH");
    assert!(bump.path.starts_with(V1), "{}", bump.path);
    assert_eq!(bump.body["series"]["count"], 2, "{}", bump.body);
    let body = bump.body.clone();
    bump.reply(200, body);
    api.quiet_for(Duration::from_millis(200)).await;
    assert_eq!(metrics.events.with_label_values(&["sent"]).get(), 3);
    assert_eq!(metrics.events.with_label_values(&["failed"]).get(), 0);
    let _ = stop.send(());
}
