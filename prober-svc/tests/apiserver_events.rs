//! kubelet's events at the HTTP boundary, through kube-rs's recorder: the exact objects, the
//! aggregation of repeats into one series, and what a full queue or a down API does.

#[path = "apiserver_support.rs"]
mod support;

use std::time::Duration;

use podward_prober::apiserver::events::{self, EventQueue, QUEUE};
use podward_prober::apiserver::metrics::ApiMetrics;
use podward_prober::event::{Event, EventKind, EventSink, Probed, killing_message};
use podward_prober::results::ProbeResult;
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
    event(EventKind::Probed(Probed::Failed(output.into())))
}

fn regarding() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "shop", "uid": "u-web",
           "fieldPath": "spec.containers{app}"})
}

#[tokio::test]
async fn three_liveness_failures_are_one_unhealthy_series_of_three_then_one_killing() {
    let (client, mut api) = mock();
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (queue, rx) = EventQueue::new(metrics.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(events::run(
        rx,
        events::recorder(client, "node-a"),
        metrics.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    for i in 0..3 {
        queue.publish(&failed(&format!(
            "HTTP probe failed with statuscode: 50{i}"
        )));
    }
    queue.publish(&event(EventKind::Killing {
        message: killing_message("app", ProbeType::Liveness),
    }));
    // Result changes and kill records are not Kubernetes events.
    queue.publish(&event(EventKind::Result {
        result: ProbeResult::Failure,
        output: String::new(),
    }));

    let create = api.next().await;
    assert_eq!(
        (create.method.as_str(), create.path.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/shop/events")
    );
    assert_eq!(create.content_type, "application/json");
    let b = &create.body;
    assert_eq!(
        (b["apiVersion"].as_str(), b["kind"].as_str()),
        (Some("events.k8s.io/v1"), Some("Event"))
    );
    assert_eq!(b["type"], "Warning");
    assert_eq!(b["reason"], "Unhealthy");
    assert_eq!(b["action"], "Probe");
    assert_eq!(
        b["note"],
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    assert_eq!(b["regarding"], regarding());
    assert_eq!(
        (
            b["reportingController"].as_str(),
            b["reportingInstance"].as_str()
        ),
        (Some("podward-prober"), Some("node-a"))
    );
    assert_eq!(b["metadata"]["namespace"], "shop");
    let name = b["metadata"]["name"].as_str().expect("name").to_owned();
    assert!(name.starts_with("web."), "{name}");
    assert!(b.get("series").is_none_or(|s| s.is_null()));
    let body = create.body.clone();
    create.reply(201, body);

    for count in [2, 3] {
        let patch = api.next().await;
        assert_eq!(patch.method, "PATCH");
        assert_eq!(
            patch.path,
            format!("/apis/events.k8s.io/v1/namespaces/shop/events/{name}")
        );
        assert_eq!(patch.content_type, "application/merge-patch+json");
        assert_eq!(patch.body["series"]["count"], count);
        assert_eq!(patch.body["reason"], "Unhealthy");
        assert_eq!(patch.body["regarding"], regarding());
        let body = patch.body.clone();
        patch.reply(200, body);
    }

    let kill = api.next().await;
    assert_eq!(kill.method, "POST");
    assert_eq!(kill.body["type"], "Normal");
    assert_eq!(kill.body["reason"], "Killing");
    assert_eq!(kill.body["action"], "Kill");
    assert_eq!(
        kill.body["note"],
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(kill.body["regarding"], regarding());
    let body = kill.body.clone();
    kill.reply(201, body);
    api.quiet_for(Duration::from_millis(500)).await;
    assert_eq!(metrics.events.with_label_values(&["sent"]).get(), 4);
    let _ = stop.send(());
}

#[tokio::test]
async fn sidecars_are_named_by_their_init_container_path_and_long_notes_are_cut_to_the_apis_limit()
{
    let (client, mut api) = mock();
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (queue, rx) = EventQueue::new(metrics.clone());
    tokio::spawn(events::run(
        rx,
        events::recorder(client, "node-a"),
        metrics,
        std::future::pending(),
    ));
    let mut ev = failed(&"x".repeat(10_240));
    ev.init_container = true;
    ev.probe = ProbeType::Readiness;
    queue.publish(&ev);
    let create = api.next().await;
    assert_eq!(
        create.body["regarding"]["fieldPath"],
        "spec.initContainers{app}"
    );
    let note = create.body["note"].as_str().expect("note");
    assert_eq!(note.len(), 1024);
    assert!(note.starts_with("Readiness probe failed: xxx"));
}

#[tokio::test]
async fn with_the_api_down_events_fail_and_then_drop_without_ever_blocking_the_publisher() {
    let (client, mut api) = mock();
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (queue, rx) = EventQueue::new(metrics.clone());
    tokio::spawn(events::run(
        rx,
        events::recorder(client, "node-a"),
        metrics.clone(),
        std::future::pending(),
    ));
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
    api.next()
        .await
        .reply_status(503, "ServiceUnavailable", "down", &[]);
    // The next event is tried (each on its own: events are not retried, as kubelet's are not
    // forever); by then the two before it are counted as failed.
    let third = api.next().await;
    assert_eq!(metrics.events.with_label_values(&["failed"]).get(), 2);
    third.reply_status(503, "ServiceUnavailable", "down", &[]);
}
