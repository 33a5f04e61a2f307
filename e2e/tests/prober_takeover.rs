//! The takeover webhook in the path of a pod CREATE, on a real containerd, shim and prober: the
//! stand-in API server calls the real `podward-prober admission` binary over HTTPS (the CA as
//! its `caBundle`, HTTP/2) as the API server does, and the kubelet-like driver runs the pod as
//! admitted.
//!
//! - webhook up: the admitted pod's containers have no probes left (nothing for kubelet to
//!   probe), they are in `podward.io/probes` with the gate and the node label; podward's prober
//!   probes the pod: its readiness writes the gate `True` at the API, its liveness failure
//!   restarts the container once, and it records one `Normal` `ProbesTakenOver` event on the
//!   pod naming the probes moved;
//! - webhook down: with `failurePolicy: Ignore` the pod is admitted unchanged (its spec probes
//!   stay for kubelet) and podward does not probe it; with `Fail` the CREATE is refused.

#[path = "support/prober.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use podward_e2e::apiserver::MockApiServer;
use podward_e2e::apiserver::admission::{FailurePolicy, MutatingWebhook};
use podward_e2e::{ContainerSpec, Daemon, PodSpec, free_port};
use serde_json::{Value, json};
use support::*;

const SERVICE_DNS: &str = "podward-admission.podward-system.svc";

/// A CA and a serving certificate for the webhook's Service, written into `dir`: the CA's PEM.
fn certificates(dir: &Path) -> Vec<u8> {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let params = rcgen::CertificateParams::new(vec![SERVICE_DNS.to_owned()]).expect("params");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write");
    ca.pem().into_bytes()
}

fn webhook(port: u16, ca: &[u8], failure_policy: FailurePolicy) -> MutatingWebhook {
    MutatingWebhook {
        name: "namespaces.takeover.podward.io".to_owned(),
        addr: format!("127.0.0.1:{port}").parse().expect("addr"),
        server_name: SERVICE_DNS.to_owned(),
        path: "/mutate".to_owned(),
        ca_bundle: ca.to_vec(),
        failure_policy,
        timeout: Duration::from_secs(3),
    }
}

/// A pod as a ReplicaSet creates it (no name yet): container `app` serving `/data` over HTTP on
/// `port`, with a readiness probe on it and an exec liveness probe that fails in the first
/// instance only.
fn replicaset_pod(port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "web-5d8f7-", "labels": {"app": "web"}},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "hostNetwork": true,
            "containers": [{
                "name": "app",
                "image": "busybox",
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": port},
                                   "periodSeconds": 1, "failureThreshold": 3},
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]},
                                  "periodSeconds": 1, "failureThreshold": 3, "timeoutSeconds": 5},
            }],
        },
    })
}

/// Runs the admitted `pod` on the node as the kubelet would (its annotations reach the
/// sandbox), with `script` in container `app` and `data` at `/data`.
async fn run_admitted(env: &Env, pod: &Value, script: &str, data: &Path) -> podward_e2e::Pod {
    let meta = &pod["metadata"];
    let mut spec = PodSpec::new(meta["name"].as_str().expect("name"))
        .uid(meta["uid"].as_str().expect("uid"))
        .namespace(meta["namespace"].as_str().expect("namespace"));
    for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
        spec = spec.annotation(k, v.as_str().expect("annotation"));
    }
    let spec = spec.container(
        ContainerSpec::new("app", &["sh", "-c", script])
            .mount(data.to_str().expect("utf8"), "/data"),
    );
    env.driver
        .run_pod(&env.node, spec)
        .await
        .expect("run the admitted pod")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_created_through_the_webhook_is_probed_by_podward_and_admitted_unchanged_without_it()
{
    let (mock, env, dir) = start_with_api().await;
    let ca = certificates(dir.path());
    let (port, admin) = (free_port(), free_port());
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let mut admission = Daemon::spawn(
        "podward-prober",
        &[
            "admission",
            "--listen-addr",
            &format!("127.0.0.1:{port}"),
            "--admin-addr",
            &format!("127.0.0.1:{admin}"),
            "--tls-cert-file",
            cert.to_str().expect("utf8"),
            "--tls-key-file",
            key.to_str().expect("utf8"),
        ],
    )
    .await
    .expect("spawn the webhook");
    admission
        .wait_ready(
            format!("127.0.0.1:{admin}").parse().expect("addr"),
            Duration::from_secs(30),
        )
        .await
        .expect("webhook ready");

    // Webhook up: taken over.
    let http_port = free_port();
    let data = env.node.dir().join("data-web");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("healthz"), "ok").expect("healthz");
    let pod = mock
        .create_pod(
            "shop",
            replicaset_pod(http_port),
            &[webhook(port, &ca, FailurePolicy::Ignore)],
        )
        .await
        .expect("admitted");
    let app = &pod["spec"]["containers"][0];
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        assert!(
            app.get(probe).is_none(),
            "kubelet has {probe} left to run: {pod}"
        );
    }
    assert_eq!(
        pod["spec"]["readinessGates"],
        json!([{"conditionType": "podward.io/ready"}])
    );
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({"podward.io/node": "true"})
    );
    let probes: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["podward.io/probes"]
            .as_str()
            .expect("annotation"),
    )
    .expect("JSON");
    assert_eq!(
        probes["app"]["readinessProbe"]["timeoutSeconds"], 1,
        "defaults written out"
    );
    // The scheduler binds it to the node (labelled podward.io/node=true).
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    mock.modify_pod(&uid, |p| p["spec"]["nodeName"] = json!(NODE));
    let script = script(&format!(
        "httpd -p 127.0.0.1:{http_port} -h /data; \
         if [ -f /data/once ]; then echo ok > /tmp/health; else touch /data/once; fi"
    ));
    let running = run_admitted(&env, &pod, &script, &data).await;
    until(
        "podward's readiness to write the gate True",
        Duration::from_secs(60),
        || gate_status(&mock, &uid) == "True",
    )
    .await
    .expect("probed by podward");
    restarts_once(&running, Duration::from_secs(60))
        .await
        .expect("podward's liveness probe restarted the container once");
    // The node's prober told the pod where its probes went: one Normal event on the pod.
    until(
        "podward's ProbesTakenOver event",
        Duration::from_secs(30),
        || !taken_over(&mock, &uid).is_empty(),
    )
    .await
    .expect("the event reached the API server");
    let events = taken_over(&mock, &uid);
    assert_eq!(events.len(), 1, "{events:?}");
    let ev = &events[0];
    assert_eq!(ev["type"], "Normal");
    assert_eq!(
        ev["message"],
        "Probes taken over by podward (moved from the pod spec into podward.io/probes; kubelet does not run them): container app: livenessProbe, readinessProbe"
    );
    assert_eq!(
        ev["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
               "namespace": "shop", "uid": uid})
    );
    assert_eq!(
        (
            ev["source"]["component"].as_str(),
            ev["source"]["host"].as_str()
        ),
        (Some("podward-prober"), Some(NODE))
    );

    // What the webhook counted, on its admin endpoint.
    let metrics = scrape(format!("127.0.0.1:{admin}").parse().expect("addr"))
        .await
        .expect("scrape the webhook");
    assert_eq!(
        sample(&metrics, &["podward_admission_reviews_total"]),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, &["podward_admission_takeovers_total"]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            &["podward_admission_skipped_total", "reason=\"no_probes\""]
        ),
        Some(0.0)
    );

    // Webhook down: admitted unchanged with Ignore, refused with Fail.
    admission.terminate().await.expect("stop the webhook");
    let original = replicaset_pod(http_port);
    let unchanged = mock
        .create_pod(
            "shop",
            original.clone(),
            &[webhook(port, &ca, FailurePolicy::Ignore)],
        )
        .await
        .expect("failurePolicy Ignore admits");
    let mut stripped = unchanged.clone();
    for k in ["uid", "name", "namespace"] {
        stripped["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove(k);
    }
    assert_eq!(stripped["status"], json!({"phase": "Pending"}));
    stripped.as_object_mut().expect("pod").remove("status");
    assert_eq!(stripped, original, "admitted unchanged");
    let refused = mock
        .create_pod("shop", original, &[webhook(port, &ca, FailurePolicy::Fail)])
        .await
        .expect_err("failurePolicy Fail refuses");
    assert!(
        refused.to_string().contains("failed calling webhook"),
        "{refused}"
    );
    // Run as admitted: podward has nothing to probe in it.
    let kept_uid = unchanged["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    mock.modify_pod(&kept_uid, |p| p["spec"]["nodeName"] = json!(NODE));
    let kept = run_admitted(&env, &unchanged, &script, &data).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        env.container(kept.uid(), "app").await.is_none(),
        "podward probes a pod it was not given"
    );
    assert_eq!(gate_status(&mock, &kept_uid), "", "no gate written");
    assert!(
        taken_over(&mock, &kept_uid).is_empty(),
        "an event for a pod not taken over"
    );
    assert_eq!(taken_over(&mock, &uid).len(), 1, "the event once");
}

/// The `ProbesTakenOver` events the API server holds about pod `uid`.
fn taken_over(mock: &MockApiServer, uid: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| e["reason"] == "ProbesTakenOver" && e["involvedObject"]["uid"] == uid)
        .collect()
}
