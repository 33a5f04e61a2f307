//! The takeover webhook on loopback HTTPS with a CA of the test's own, and a client that talks
//! to it as the API server does (HTTP/2 when offered, the CA as its only trust root).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podward_prober::kubernetes::admission::metrics::AdmissionMetrics;
use podward_prober::kubernetes::admission::server::Webhook;
use podward_prober::kubernetes::admission::takeover::Policy;
use podward_prober::kubernetes::admission::tls::{CertFiles, CertReloader, server_config};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

/// The webhook Service's DNS name, as the API server dials it.
pub const SERVICE_DNS: &str = "podward-admission.podward-system.svc";

/// A CA and the serving certificates it signs.
pub struct Ca {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl Ca {
    /// A fresh CA.
    pub fn generate() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "podward-admission-ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("ca");
        Self { key, cert }
    }

    /// The CA certificate (DER).
    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A serving certificate for [`SERVICE_DNS`] with `cn` as its common name: (cert PEM, key PEM).
    pub fn serving(&self, cn: &str) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec![SERVICE_DNS.to_owned()]).expect("p");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

/// A running webhook.
pub struct Running {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its counters.
    pub metrics: AdmissionMetrics,
    /// The certificate files it serves.
    pub files: CertFiles,
    /// The certificate holder (reload on demand).
    pub reloader: Arc<CertReloader>,
    _dir: tempfile::TempDir,
    _task: tokio::task::JoinHandle<()>,
}

/// Writes `pair` to `files` the way a Secret volume updates: new files renamed into place.
pub fn write_pair(files: &CertFiles, pair: &(String, String)) {
    let put = |path: &Path, text: &str| {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    };
    put(&files.cert, &pair.0);
    put(&files.key, &pair.1);
}

/// Starts the webhook with `policy`, serving a certificate of `ca` (common name "first"),
/// re-reading its files every `reload` when given.
pub async fn start(ca: &Ca, policy: Policy, reload: Option<Duration>) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    write_pair(&files, &ca.serving("first"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let reloader =
        Arc::new(CertReloader::load(files.clone(), provider.clone()).expect("certificate"));
    let config = server_config(reloader.clone(), provider).expect("config");
    let metrics = AdmissionMetrics::new(None).expect("metrics");
    if let Some(period) = reload {
        tokio::spawn(reloader.clone().watch(period, metrics.clone()));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let webhook = Webhook {
        policy: Arc::new(policy),
        metrics: metrics.clone(),
    };
    let task = tokio::spawn(webhook.serve(
        listener,
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        std::future::pending(),
    ));
    Running {
        port,
        metrics,
        files,
        reloader,
        _dir: dir,
        _task: task,
    }
}

/// The policy the chart installs: the default gate and node label.
pub fn chart_policy() -> Policy {
    Policy {
        gate_condition: "podward.io/ready".to_owned(),
        node_selector: Some(("podward.io/node".to_owned(), "true".to_owned())),
    }
}

/// One HTTPS exchange with the webhook, trusting only `ca`: (status, body, the server
/// certificate's DER).
pub async fn post(
    port: u16,
    ca: &CertificateDer<'static>,
    path: &str,
    body: &[u8],
) -> (http::StatusCode, Vec<u8>, Vec<u8>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = ServerName::try_from(SERVICE_DNS).expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the CA as the only root");
    let (_, session) = tls.get_ref();
    let served = session.peer_certificates().expect("certificate")[0].to_vec();
    assert_eq!(
        session.alpn_protocol(),
        Some(&b"h2"[..]),
        "HTTP/2, as the API server"
    );
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("h2");
    tokio::spawn(conn);
    let req = http::Request::post(format!("https://{SERVICE_DNS}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, bytes.to_vec(), served)
}

/// An AdmissionReview v1 request as the API server sends it for a pod CREATE of `pod` in
/// `namespace`.
pub fn review(namespace: &str, pod: &Value) -> Value {
    serde_json::json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "1c4e5e1c-4c6b-4b9a-a5a5-0a0b1c2d3e4f",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
            },
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// Sends `pod` through the webhook and applies its patch with `json-patch`, as the API server
/// applies a JSONPatch response: (the response, the pod after the patch).
pub async fn admit(w: &Running, ca: &CertificateDer<'static>, pod: &Value) -> (Value, Value) {
    let body = serde_json::to_vec(&review("default", pod)).expect("json");
    let (status, bytes, _) = post(w.port, ca, "/mutate", &body).await;
    assert_eq!(
        status,
        http::StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let answer: Value = serde_json::from_slice(&bytes).expect("response JSON");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = answer["response"].clone();
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true, "the webhook never refuses a pod");
    let mut patched = pod.clone();
    if let Some(patch) = response.get("patch").and_then(Value::as_str) {
        assert_eq!(response["patchType"], "JSONPatch");
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("base64");
        let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("a JSON Patch");
        json_patch::patch(&mut patched, &patch).expect("the patch applies to the pod");
    }
    (response, patched)
}

/// A fixture file's JSON.
pub fn fixture(name: &str) -> Value {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "admission_fixtures",
        name,
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}
