//! The `Normal` `ProbesTakenOver` event at the HTTP boundary: a pod the takeover webhook admitted
//! (its patch applied with a real JSON Patch library) is listed by the node's pod reflector, and
//! the prober records, once, the event that tells `kubectl describe pod` readers where the
//! probes went. A prober that restarts and finds the pod's readiness-gate condition written, or
//! the pod started, records nothing again.

#[path = "support/apiserver.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use podward_prober::clock::Clock;
use podward_prober::consequences::kill::Killer;
use podward_prober::kubernetes::admission::takeover::{self, Decision, Policy};
use podward_prober::kubernetes::events::{self, EventQueue, RecorderConfig};
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::kubernetes::pods::{PodSink, reflect};
use podward_prober::metrics::Metrics;
use podward_prober::model::ContainerInfo;
use podward_prober::model::api_pod::ApiPod;
use podward_prober::model::outcome::Outcome;
use podward_prober::pods::manager::{Manager, Settings};
use podward_prober::probing::runner::ProbeRunner;
use podward_prober::publish::event::{Event, EventKind, EventSink, Events};
use podward_prober::spec::{ProbeSpec, ProbeType};
use podward_prober::stopper::{StopError, Stopper};
use serde_json::{Value, json};
use support::*;
use tokio::sync::oneshot;

const EVENTS: &str = "/api/v1/namespaces/shop/events";
const UID: &str = "5c8f3a2e-0000-4000-8000-00000000a001";

/// Never probes (no container of these pods runs here) and never stops anything.
struct Idle;

impl ProbeRunner for Idle {
    fn run<'a>(
        &'a self,
        _: ProbeType,
        _: &'a ProbeSpec,
        _: std::net::IpAddr,
        _: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(std::future::pending())
    }
}

impl Stopper for Idle {
    fn stop_container(&self, _: String, _: i64) -> BoxFuture<'_, Result<(), StopError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The reflector's view into the manager, as the daemon wires it, counting what it applied.
struct ToManager {
    manager: Manager,
    applied: AtomicUsize,
}

impl PodSink for ToManager {
    fn apply(&self, pod: ApiPod) {
        self.manager.set_api_pod(pod);
        self.applied.fetch_add(1, Ordering::SeqCst);
    }
    fn delete(&self, uid: &str) {
        self.manager.remove_api_pod(uid);
    }
    fn known(&self) -> Vec<String> {
        self.manager.registry().api_pod_uids()
    }
}

/// One prober's API side: its reflector on `pods`, its recorder on `events`.
struct Prober {
    queue: EventQueue,
    sink: Arc<ToManager>,
    stop: Vec<oneshot::Sender<()>>,
}

fn prober(pods: kube::Client, events_client: kube::Client) -> Prober {
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (queue, rx) = EventQueue::new(metrics.clone());
    let clock = Clock::system();
    let prober_metrics = Arc::new(Metrics::unregistered().expect("metrics"));
    let events = Events::new(vec![Arc::new(queue.clone())]);
    let killer = Killer::new(
        Arc::new(Idle),
        None,
        prober_metrics.clone(),
        events.clone(),
        clock,
    );
    let manager = Manager::new(
        Arc::new(Idle),
        killer,
        events,
        prober_metrics,
        clock,
        Settings::default(),
    );
    let sink = Arc::new(ToManager {
        manager,
        applied: AtomicUsize::new(0),
    });
    let (stop_rec, rec_stopped) = oneshot::channel::<()>();
    let config = RecorderConfig {
        retry_sleep: Duration::from_millis(10),
        ..RecorderConfig::new("node-a")
    };
    tokio::spawn(events::run(
        rx,
        events_client,
        config,
        metrics.clone(),
        async {
            let _ = rec_stopped.await;
        },
    ));
    let (stop_ref, ref_stopped) = oneshot::channel::<()>();
    let s = sink.clone();
    tokio::spawn(async move {
        let api: kube::Api<Pod> = kube::Api::all(pods);
        reflect(api, "node-a", "podward.io/ready", &*s, &metrics, async {
            let _ = ref_stopped.await;
        })
        .await;
    });
    Prober {
        queue,
        sink,
        stop: vec![stop_rec, stop_ref],
    }
}

impl Prober {
    /// Waits until the reflector has handed `n` pod versions to the manager.
    async fn applied(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while self.sink.applied.load(Ordering::SeqCst) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the reflector applied no pod"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Queues a note the recorder writes after anything queued before it: the next event
    /// request is this one unless an earlier event was queued.
    fn marker(&self) {
        self.queue.publish(&Event {
            pod_uid: UID.into(),
            pod_name: "web-5d8f7-x2k9q".into(),
            pod_namespace: "shop".into(),
            container_name: "app".into(),
            container_id: "c1".into(),
            init_container: false,
            probe: ProbeType::Liveness,
            at_ns: 1,
            kind: EventKind::Probed(Outcome::Failure("marker".into())),
        });
    }

    fn stop(self) {
        for s in self.stop {
            let _ = s.send(());
        }
    }
}

/// A ReplicaSet's pod with a sidecar: an HTTP readiness and an exec liveness probe on `app`, a
/// TCP readiness probe on the restartable init container `proxy`.
fn replicaset_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-5d8f7-", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "initContainers": [{
                "name": "proxy", "image": "registry.example/proxy:1", "restartPolicy": "Always",
                "readinessProbe": {"tcpSocket": {"port": 15001}}
            }],
            "containers": [{
                "name": "app", "image": "registry.example/app:1",
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]}}
            }]
        }
    })
}

/// The pod as the API server holds it once the webhook's patch is applied, it is created
/// (`Pending`, no conditions) and bound to node-a; `condition`: the gate condition's status.
fn admitted(rv: &str, phase: &str, condition: Option<&str>) -> Value {
    let policy = Policy {
        gate_condition: "podward.io/ready".into(),
        node_selector: Some(("podward.io/node".into(), "true".into())),
    };
    let mut pod = replicaset_pod();
    let Decision::TakeOver { patch, .. } = takeover::decide(&pod, &policy) else {
        panic!("the webhook takes this pod over");
    };
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON Patch");
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    let meta = &mut pod["metadata"];
    meta["name"] = json!("web-5d8f7-x2k9q");
    meta["uid"] = json!(UID);
    meta["resourceVersion"] = json!(rv);
    pod["spec"]["nodeName"] = json!("node-a");
    pod["status"] = json!({"phase": phase, "conditions": []});
    if let Some(status) = condition {
        pod["status"]["conditions"] = json!([{"type": "podward.io/ready", "status": status,
            "lastTransitionTime": "2026-11-29T04:00:00Z"}]);
    }
    pod
}

/// Answers a create with the object, as the API server does.
fn created(ex: Exchange) -> Value {
    assert_eq!((ex.method.as_str(), ex.path.as_str()), ("POST", EVENTS));
    let body = ex.body.clone();
    ex.reply(201, body.clone());
    body
}

fn is_marker(ex: &Exchange) -> bool {
    ex.method == "POST" && ex.body["reason"] == "Unhealthy"
}

#[tokio::test]
async fn a_taken_over_pod_gets_one_normal_event_and_a_restarted_prober_none_once_it_was_met() {
    // The first prober to see the pod: one `Normal` event naming what moved, on the pod.
    let (pods_client, mut pods) = mock();
    let (events_client, mut api) = mock();
    let p = prober(pods_client, events_client);
    let list = pods.next().await;
    list.reply(
        200,
        pod_list("100", vec![admitted("90", "Pending", None)], None),
    );
    let watch = pods.next().await;
    let feed = watch.stream();

    let mut body = created(api.next().await);
    let name = body["metadata"]["name"].as_str().expect("name").to_owned();
    assert!(name.starts_with("web-5d8f7-x2k9q."), "{name}");
    let first = body["firstTimestamp"].clone();
    assert!(
        first.is_string() && body["lastTimestamp"] == first,
        "{body}"
    );
    body["metadata"]["name"] = json!("NAME");
    body["firstTimestamp"] = json!("T");
    body["lastTimestamp"] = json!("T");
    assert_eq!(
        body,
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "NAME", "namespace": "shop"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-5d8f7-x2k9q",
                               "namespace": "shop", "uid": UID},
            "type": "Normal",
            "reason": "ProbesTakenOver",
            "message": "Probes taken over by podward (moved from the pod spec into podward.io/probes; kubelet does not run them): container proxy: readinessProbe; container app: livenessProbe, readinessProbe",
            "count": 1,
            "firstTimestamp": "T", "lastTimestamp": "T",
            "source": {"component": "podward-prober", "host": "node-a"},
            "reportingComponent": "podward-prober", "reportingInstance": "node-a"
        })
    );

    // Later versions of the same pod (still starting, the gate not yet written) record nothing.
    feed.event("MODIFIED", admitted("110", "Pending", None))
        .await;
    p.applied(2).await;
    p.marker();
    let next = api.next().await;
    assert!(is_marker(&next), "a second event: {}", next.body);
    created(next);
    p.stop();

    // A restarted prober finds the gate condition written: the pod was seen before.
    let (pods_client, mut pods) = mock();
    let (events_client, mut api) = mock();
    let p = prober(pods_client, events_client);
    pods.next().await.reply(
        200,
        pod_list("200", vec![admitted("190", "Pending", Some("False"))], None),
    );
    let _feed = pods.next().await.stream();
    p.applied(1).await;
    p.marker();
    let next = api.next().await;
    assert!(
        is_marker(&next),
        "a restarted prober records it again: {}",
        next.body
    );
    created(next);
    p.stop();

    // Without the gate's condition to go by (a liveness-only takeover adds no gate), a pod
    // that runs has been met by a prober before.
    let (pods_client, mut pods) = mock();
    let (events_client, mut api) = mock();
    let p = prober(pods_client, events_client);
    pods.next().await.reply(
        200,
        pod_list("300", vec![admitted("290", "Running", None)], None),
    );
    let _feed = pods.next().await.stream();
    p.applied(1).await;
    p.marker();
    let next = api.next().await;
    assert!(
        is_marker(&next),
        "an event for a running pod: {}",
        next.body
    );
    created(next);
    p.stop();
}
