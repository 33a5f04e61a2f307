//! The stand-in's admission path: a pod CREATE goes through mutating webhooks as the API server
//! sends it (an `admission.k8s.io/v1` AdmissionReview POSTed over HTTPS/2, the server's
//! certificate checked against the webhook's `caBundle` for its Service's DNS name, within
//! `timeoutSeconds`), each answer's JSON Patch applied in turn, then the pod stored with a UID
//! (and a name from `generateName`). A call that fails is what the webhook's `failurePolicy`
//! says: `Ignore` admits the pod as it was, `Fail` refuses it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::MockApiServer;

/// What the API server does when a call to the webhook fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit the object as it was.
    Ignore,
    /// Refuse the request.
    Fail,
}

/// One entry of a MutatingWebhookConfiguration, with the Service resolved to an address.
#[derive(Debug, Clone)]
pub struct MutatingWebhook {
    /// The webhook's name (in error messages, as the API server's).
    pub name: String,
    /// Where the Service's endpoint listens.
    pub addr: SocketAddr,
    /// The name the certificate must carry (`<service>.<namespace>.svc`).
    pub server_name: String,
    /// `clientConfig.service.path`.
    pub path: String,
    /// `clientConfig.caBundle`, PEM.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy`.
    pub failure_policy: FailurePolicy,
    /// `timeoutSeconds`.
    pub timeout: Duration,
}

/// Why the stand-in refused a CREATE.
#[derive(Debug, thiserror::Error)]
#[error("Internal error occurred: failed calling webhook \"{webhook}\": {reason}")]
pub struct AdmissionRefused {
    /// The webhook.
    pub webhook: String,
    /// The call's failure.
    pub reason: String,
}

impl MockApiServer {
    /// Creates `pod` in `namespace` through `webhooks` (in order): the stored pod, as admitted.
    pub async fn create_pod(
        &self,
        namespace: &str,
        mut pod: Value,
        webhooks: &[MutatingWebhook],
    ) -> Result<Value, AdmissionRefused> {
        pod["metadata"]["namespace"] = json!(namespace);
        for w in webhooks {
            match tokio::time::timeout(w.timeout, call(w, namespace, &pod)).await {
                Ok(Ok(patched)) => pod = patched,
                Ok(Err(reason)) => fail(w, reason)?,
                Err(_) => fail(w, "context deadline exceeded".to_owned())?,
            }
        }
        let uid = format!("{:032x}", rand::random::<u128>());
        pod["metadata"]["uid"] = json!(uid);
        // The API server's PrepareForCreate: whatever status was sent, a new pod is Pending.
        pod["status"] = json!({"phase": "Pending"});
        if pod["metadata"].get("name").is_none_or(Value::is_null) {
            let prefix = pod["metadata"]["generateName"].as_str().unwrap_or("pod-");
            pod["metadata"]["name"] = json!(format!("{prefix}{}", &uid[..5]));
        }
        self.put_pod(pod.clone());
        Ok(pod)
    }
}

fn fail(w: &MutatingWebhook, reason: String) -> Result<(), AdmissionRefused> {
    match w.failure_policy {
        FailurePolicy::Ignore => {
            tracing::warn!(webhook = %w.name, %reason, "failed calling webhook, failing open");
            Ok(())
        }
        FailurePolicy::Fail => Err(AdmissionRefused {
            webhook: w.name.clone(),
            reason,
        }),
    }
}

/// One AdmissionReview round trip; the pod with the answer's patch applied.
async fn call(w: &MutatingWebhook, namespace: &str, pod: &Value) -> Result<Value, String> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&w.ca_bundle) {
        roots
            .add(cert.map_err(|e| format!("caBundle: {e}"))?)
            .map_err(|e| format!("caBundle: {e}"))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(w.addr)
        .await
        .map_err(|e| format!("dial tcp {}: {e}", w.addr))?;
    let name = rustls::pki_types::ServerName::try_from(w.server_name.clone())
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let uid = format!("{:032x}", rand::random::<u128>());
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name").cloned().unwrap_or(Value::Null),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "e2e", "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    });
    let req = http::Request::post(format!("https://{}{}", w.server_name, w.path))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(review.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("the server responded {status}"));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let response = &answer["response"];
    if response["uid"] != json!(uid) {
        return Err("expected response.uid to match the request".to_owned());
    }
    if response["allowed"] != json!(true) {
        return Err(format!("denied: {}", response["status"]));
    }
    let mut pod = pod.clone();
    if let Some(patch) = response.get("patch").and_then(Value::as_str) {
        if response["patchType"] != json!("JSONPatch") {
            return Err("patchType must be JSONPatch".to_owned());
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|e| e.to_string())?;
        let patch: json_patch::Patch = serde_json::from_slice(&raw).map_err(|e| e.to_string())?;
        json_patch::patch(&mut pod, &patch).map_err(|e| e.to_string())?;
    }
    Ok(pod)
}
