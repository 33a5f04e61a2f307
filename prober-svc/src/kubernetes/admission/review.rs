//! One `admission.k8s.io/v1` AdmissionReview: the request read, the pod decided on, the answer
//! written. Every answer allows the pod: the webhook only ever adds a patch.

use base64::Engine;
use serde_json::{Value, json};

use super::metrics::AdmissionMetrics;
use super::takeover::{self, Decision, Policy, SkipReason};

/// Why a body is not an AdmissionReview the webhook answers (HTTP 400: the API server then
/// applies the webhook's failurePolicy, `Ignore`, and admits the pod unchanged).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but not an `admission.k8s.io/v1` AdmissionReview with a request and its uid.
    #[error("not an admission.k8s.io/v1 AdmissionReview with request.uid: {0}")]
    Shape(&'static str),
}

/// What the webhook answered, for its log line.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The AdmissionReview to send back.
    pub body: Value,
    /// The pod's `namespace/name` (or `namespace/generateName*`), for logs.
    pub pod: String,
    /// The decision.
    pub decision: Decision,
}

/// Reads `body` as an AdmissionReview and answers it under `policy`, counting in `metrics`.
pub fn answer(
    body: &[u8],
    policy: &Policy,
    metrics: &AdmissionMetrics,
) -> Result<Answer, ReviewError> {
    let review: Value = serde_json::from_slice(body)?;
    if review.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1")
        || review.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
    {
        return Err(ReviewError::Shape("apiVersion or kind"));
    }
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or(ReviewError::Shape("no request"))?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or(ReviewError::Shape("no request.uid"))?;
    let pod = pod_name(request);
    let decision = if is_pod_create(request) {
        match request.get("object") {
            Some(object) if object.is_object() => takeover::decide(object, policy),
            _ => Decision::Skip(SkipReason::Undecodable),
        }
    } else {
        Decision::Skip(SkipReason::NotPodCreate)
    };
    metrics.reviews.inc();
    let mut response = json!({ "uid": uid, "allowed": true });
    match &decision {
        Decision::TakeOver { patch, moved } => {
            metrics.takeovers.inc();
            let bytes = patch.to_string();
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(bytes.as_bytes()));
            let containers: Vec<&str> = moved.keys().map(String::as_str).collect();
            response["warnings"] = json!([format!(
                "podward runs the probes of {} (moved to the podward.io/probes annotation)",
                containers.join(", ")
            )]);
        }
        Decision::Skip(reason) => metrics.skipped.with_label_values(&[reason.label()]).inc(),
    }
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    Ok(Answer {
        body,
        pod,
        decision,
    })
}

/// A CREATE of a core v1 pod itself (no subresource).
fn is_pod_create(request: &Value) -> bool {
    let field = |k: &str| {
        request
            .get("kind")
            .and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    field("group").as_deref() == Some("")
        && field("version").as_deref() == Some("v1")
        && field("kind").as_deref() == Some("Pod")
        && request.get("operation").and_then(Value::as_str) == Some("CREATE")
        && request
            .get("subResource")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
}

/// `namespace/name`, or `namespace/generateName*` while the pod has no name yet.
fn pod_name(request: &Value) -> String {
    let ns = request
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let meta = request.pointer("/object/metadata");
    let get = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    match (get("name").filter(|n| !n.is_empty()), get("generateName")) {
        (Some(name), _) => format!("{ns}/{name}"),
        (None, Some(prefix)) => format!("{ns}/{prefix}*"),
        (None, None) => format!("{ns}/?"),
    }
}
