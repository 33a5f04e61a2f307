//! The takeover webhook at its HTTP boundary: AdmissionReview v1 requests for real pod objects
//! (shaped as the API server sends them: defaulted, with the service-account volume and the
//! default tolerations), over HTTPS/2 with the chart's kind of CA; each answer's JSON Patch is
//! applied with the `json-patch` crate and must give exactly the expected pod.

#[path = "support/admission.rs"]
mod support;

use std::time::Duration;

use podward_prober::kubernetes::admission::takeover::Policy;
use serde_json::{Value, json};
use support::{Ca, admit, chart_policy, fixture, post, review, start, write_pair};

/// `pod` with the JSON strings of its podward annotations parsed, so that a difference shows as
/// a JSON difference.
fn readable(mut pod: Value) -> Value {
    if let Some(Value::Object(a)) = pod.pointer_mut("/metadata/annotations") {
        for key in ["podward.io/probes", "podward.io/probes-moved"] {
            if let Some(Value::String(s)) = a.get(key).cloned() {
                a.insert(
                    key.to_owned(),
                    serde_json::from_str(&s).expect("annotation JSON"),
                );
            }
        }
    }
    pod
}

fn skipped(w: &support::Running, reason: &str) -> u64 {
    w.metrics.skipped.with_label_values(&[reason]).get()
}

#[tokio::test]
async fn the_docs_liveness_http_pod_gets_its_probe_in_the_annotation_and_the_node_label() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let pod = fixture("liveness-http.json");
    let (response, patched) = admit(&w, &ca.der(), &pod).await;
    let expected = fixture("liveness-http.expected.json");
    assert_eq!(readable(patched.clone()), readable(expected.clone()));
    // Byte for byte: the annotation holds the API server's defaulted Probe object.
    assert_eq!(
        patched["metadata"]["annotations"]["podward.io/probes"],
        expected["metadata"]["annotations"]["podward.io/probes"]
    );
    // A liveness probe alone does not decide readiness: no gate.
    assert!(patched["spec"].get("readinessGates").is_none());
    let warning = response["warnings"][0].as_str().expect("a warning");
    assert!(warning.contains("liveness"), "{warning}");
    assert_eq!(w.metrics.reviews.get(), 1);
    assert_eq!(w.metrics.takeovers.get(), 1);
}

#[tokio::test]
async fn a_replicaset_pod_without_a_name_moves_every_probe_and_gets_the_gate() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let (_, patched) = admit(&w, &ca.der(), &fixture("replicaset-pod.json")).await;
    assert_eq!(
        readable(patched),
        readable(fixture("replicaset-pod.expected.json"))
    );
}

#[tokio::test]
async fn sidecars_move_unless_they_have_a_startup_probe_and_defaults_are_the_api_servers() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let (_, patched) = admit(&w, &ca.der(), &fixture("sidecars.json")).await;
    let expected = fixture("sidecars.expected.json");
    assert_eq!(readable(patched.clone()), readable(expected));
    // The plain init container and the sidecar with a startup probe are untouched.
    let init = &patched["spec"]["initContainers"];
    assert_eq!(
        init[0],
        fixture("sidecars.json")["spec"]["initContainers"][0]
    );
    assert!(init[2].get("startupProbe").is_some() && init[2].get("livenessProbe").is_some());
}

#[tokio::test]
async fn without_a_node_label_nothing_is_added_to_the_node_selector() {
    let ca = Ca::generate();
    let policy = Policy {
        node_selector: None,
        ..chart_policy()
    };
    let w = start(&ca, policy, None).await;
    let (_, patched) = admit(&w, &ca.der(), &fixture("liveness-http.json")).await;
    assert!(patched["spec"].get("nodeSelector").is_none());
    assert!(
        patched["spec"]["containers"][0]
            .get("livenessProbe")
            .is_none()
    );
}

/// A pod edited by `f`.
fn pod_with(f: impl FnOnce(&mut Value)) -> Value {
    let mut pod = fixture("replicaset-pod.json");
    f(&mut pod);
    pod
}

#[tokio::test]
async fn pods_the_kubelet_keeps_are_admitted_unchanged_with_the_reason_counted() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let cases: Vec<(&str, Value)> = vec![
        (
            "already_annotated",
            pod_with(|p| {
                p["metadata"]["annotations"] = json!({"podward.io/probes": "{}"});
            }),
        ),
        (
            "opted_out",
            pod_with(|p| {
                p["metadata"]["annotations"] = json!({"podward.io/probes-takeover": "false"});
            }),
        ),
        (
            "no_probes",
            pod_with(|p| {
                for c in p["spec"]["containers"].as_array_mut().expect("containers") {
                    let c = c.as_object_mut().expect("container");
                    c.remove("livenessProbe");
                    c.remove("readinessProbe");
                    c.remove("startupProbe");
                }
            }),
        ),
        (
            "probe_names_host",
            pod_with(|p| {
                p["spec"]["containers"][0]["livenessProbe"]["httpGet"]["host"] =
                    json!("example.com");
            }),
        ),
        (
            // The API server refuses this pod; the webhook must not hide the probe from it.
            "invalid_probe",
            pod_with(|p| {
                p["spec"]["containers"][0]["livenessProbe"]["successThreshold"] = json!(2);
            }),
        ),
        (
            "node_bound",
            pod_with(|p| p["spec"]["nodeName"] = json!("node-a")),
        ),
        (
            // A DaemonSet's pod: the controller binds it with matchFields on metadata.name.
            "node_bound",
            pod_with(|p| {
                p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}});
            }),
        ),
        (
            // Moved, the probes would take the annotations past the API server's 256 KiB.
            "annotations_too_large",
            pod_with(|p| {
                p["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(262_000)});
            }),
        ),
        (
            "node_selector_conflict",
            pod_with(|p| p["spec"]["nodeSelector"]["podward.io/node"] = json!("false")),
        ),
    ];
    for (reason, pod) in &cases {
        let before = skipped(&w, reason);
        let (response, patched) = admit(&w, &ca.der(), pod).await;
        assert!(response.get("patch").is_none(), "{reason}: {response}");
        assert_eq!(&patched, pod, "{reason}");
        assert_eq!(skipped(&w, reason), before + 1, "{reason}");
    }
    assert_eq!(w.metrics.takeovers.get(), 0);
    assert_eq!(w.metrics.reviews.get(), cases.len() as u64);
}

#[tokio::test]
async fn a_pod_already_on_podward_nodes_by_its_own_selector_is_taken_even_when_bound() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let pod = pod_with(|p| {
        p["spec"]["nodeName"] = json!("node-a");
        p["spec"]["nodeSelector"]["podward.io/node"] = json!("true");
    });
    let (_, patched) = admit(&w, &ca.der(), &pod).await;
    assert_eq!(patched["spec"]["nodeSelector"], pod["spec"]["nodeSelector"]);
    let moved: Value = serde_json::from_str(
        patched["metadata"]["annotations"]["podward.io/probes-moved"]
            .as_str()
            .expect("record"),
    )
    .expect("JSON");
    assert!(
        moved.get("nodeSelector").is_none(),
        "nothing added: {moved}"
    );
}

#[tokio::test]
async fn updates_and_other_kinds_pass_and_garbage_is_refused_for_the_failure_policy() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), None).await;
    let mut update = review("default", &fixture("liveness-http.json"));
    update["request"]["operation"] = json!("UPDATE");
    let (status, body, _) = post(w.port, &ca.der(), "/mutate", update.to_string().as_bytes()).await;
    assert_eq!(status, http::StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("patch").is_none());
    assert_eq!(skipped(&w, "not_pod_create"), 1);
    for garbage in [&b"not json"[..], br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#, br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#] {
        let (status, _, _) = post(w.port, &ca.der(), "/mutate", garbage).await;
        assert_eq!(status, http::StatusCode::BAD_REQUEST);
    }
    assert_eq!(w.metrics.bad_requests.get(), 3);
    let (status, _, _) = post(w.port, &ca.der(), "/other", b"{}").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let ca = Ca::generate();
    let w = start(&ca, chart_policy(), Some(Duration::from_millis(50))).await;
    let body = review("default", &fixture("liveness-http.json")).to_string();
    let (_, _, first) = post(w.port, &ca.der(), "/mutate", body.as_bytes()).await;
    // A half-written rotation: the previous certificate stays in use.
    std::fs::write(&w.files.key, "-----BEGIN PRIVATE KEY-----\ngarbage\n").expect("write");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while w.metrics.cert_reloads.with_label_values(&["error"]).get() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broken key was never read"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _, still) = post(w.port, &ca.der(), "/mutate", body.as_bytes()).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(still, first);
    // The rotation completes (a new CA-signed pair, as helm upgrade writes): served from then on.
    write_pair(&w.files, &ca.serving("second"));
    loop {
        let (status, _, served) = post(w.port, &ca.der(), "/mutate", body.as_bytes()).await;
        assert_eq!(status, http::StatusCode::OK);
        if served != first {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(w.metrics.cert_reloads.with_label_values(&["ok"]).get() >= 1);
    assert!(
        !w.reloader.reload().expect("reload"),
        "unchanged files are not reloaded"
    );
}
