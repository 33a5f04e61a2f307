//! kubelet's HTTPS → HTTP fallback of httpGet hooks (`runHTTPHandler`): an HTTPS request whose
//! server answers the TLS handshake in plain HTTP (Go's "http: server gave HTTP response to
//! HTTPS client") is sent again over HTTP, without its `Authorization` header; any other TLS
//! failure is the hook's failure, and a certificate is never checked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::spec::{HttpGetSpec, HttpScheme, PortRef};
use crate::test_fakes::NoExec;

/// What a plain HTTP server answers to bytes that are not HTTP (a TLS ClientHello): Go's
/// `net/http` server's answer.
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request";

/// A plain HTTP server: a request starting `GET ` is recorded and answered `answer` (or the
/// connection closed when `None`), anything else (a TLS handshake) gets [`BAD_REQUEST`].
async fn plain_server(answer: Option<&'static [u8]>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let gets = Arc::new(Mutex::new(Vec::new()));
    let seen = gets.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                if !buf[..n].starts_with(b"GET ") {
                    let _ = s.write_all(BAD_REQUEST).await;
                    return;
                }
                seen.lock()
                    .push(String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase());
                if let Some(a) = answer {
                    let _ = s.write_all(a).await;
                }
            });
        }
    });
    (port, gets)
}

/// A TLS server with a self-signed certificate for another name (nothing a verifying client
/// would accept), counting the requests it answers `200`.
async fn tls_server() -> (u16, Arc<Mutex<usize>>) {
    let cert = rcgen::generate_simple_self_signed(vec!["elsewhere.test".to_owned()]).expect("cert");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let answered = Arc::new(Mutex::new(0));
    let count = answered.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                if buf[..n].starts_with(b"GET ") {
                    *count.lock() += 1;
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (port, answered)
}

fn pod() -> (PodInfo, ContainerInfo) {
    let pod = PodInfo {
        uid: "u".into(),
        name: "p".into(),
        namespace: "ns".into(),
        sandbox_id: "s".into(),
        sandbox_created_at_ns: 0,
        ip: Some("127.0.0.1".parse().expect("ip")),
        probes_annotation: None,
        stop_requested_at_ns: 0,
        containers: BTreeMap::new(),
        api: None,
    };
    (pod, crate::test_fakes::running_app("c1"))
}

/// An HTTPS hook to the pod IP (127.0.0.1) at `port`, with an `Authorization` header and
/// another.
fn https_hook(port: u16) -> Hook {
    Hook::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Https,
        host: None,
        path: "/quit".into(),
        port: PortRef::Number(port.into()),
        headers: vec![
            ("authorization".into(), "Bearer secret".into()),
            ("X-Reason".into(), "liveness".into()),
        ],
    })
}

fn hooks() -> Hooks {
    Hooks::new(Arc::new(NoExec), "1.33")
}

const T: Duration = Duration::from_secs(3);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn an_https_hook_to_a_plain_http_server_is_delivered_over_http_without_authorization() {
    let (port, gets) = plain_server(Some(OK)).await;
    let (p, c) = pod();
    let res = hooks().run(&https_hook(port), &p, &c, T).await;
    assert_eq!(
        res,
        Ok(HookRan::HttpFallback {
            host: format!("127.0.0.1:{port}")
        })
    );
    let gets = gets.lock().clone();
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert!(gets[0].starts_with("get /quit http/1.1\r\n"), "{}", gets[0]);
    assert!(
        gets[0].contains("\r\nx-reason: liveness\r\n"),
        "{}",
        gets[0]
    );
    assert!(
        gets[0].contains("\r\nuser-agent: kube-lifecycle/1.33\r\n"),
        "{}",
        gets[0]
    );
    assert!(
        !gets[0].contains("authorization"),
        "kubelet drops the Authorization header before it falls back: {}",
        gets[0]
    );
}

#[tokio::test]
async fn a_fallback_that_fails_too_fails_the_hook_with_the_https_error() {
    // The plain server takes the GET and closes without an answer.
    let (port, gets) = plain_server(None).await;
    let (p, c) = pod();
    let res = hooks().run(&https_hook(port), &p, &c, T).await;
    assert_eq!(
        res,
        Err(HookError::Http(format!(
            "Get \"https://127.0.0.1:{port}/quit\": http: server gave HTTP response to HTTPS client"
        )))
    );
    assert_eq!(gets.lock().len(), 1, "the fallback was tried");
}

#[tokio::test]
async fn a_certificate_nobody_would_trust_is_no_failure_and_no_fallback() {
    let (port, answered) = tls_server().await;
    let (p, c) = pod();
    let res = hooks().run(&https_hook(port), &p, &c, T).await;
    assert_eq!(res, Ok(HookRan::AsWritten), "kubelet's InsecureSkipVerify");
    assert_eq!(*answered.lock(), 1, "delivered over TLS");
}

#[tokio::test]
async fn another_handshake_failure_fails_the_hook_without_a_plain_request() {
    // Something that is neither TLS nor HTTP answers the ClientHello.
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let plain_requests = Arc::new(Mutex::new(0usize));
    let seen = plain_requests.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).await.unwrap_or(0);
            if buf[..n].starts_with(b"GET ") {
                *seen.lock() += 1;
            }
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        }
    });
    let (p, c) = pod();
    let res = hooks().run(&https_hook(port), &p, &c, T).await;
    match res {
        Err(HookError::Http(text)) => {
            assert!(
                text.starts_with(&format!("Get \"https://127.0.0.1:{port}/quit\": tls: ")),
                "{text}"
            );
            assert!(!text.contains("server gave HTTP response"), "{text}");
        }
        other => panic!("a failed hook, got {other:?}"),
    }
    assert_eq!(*plain_requests.lock(), 0, "no fallback");
}

#[test]
fn the_fallback_is_kubelets_warning_about_the_pod() {
    let (p, c) = pod();
    let ev = crate::publish::event::Event::lifecycle_http_fallback(
        &p,
        &c,
        crate::spec::ProbeType::Liveness,
        "10.1.0.5:8443".into(),
        7,
    );
    let rec = ev.recorded().expect("recorded");
    assert!(rec.warning);
    assert_eq!(rec.reason, "LifecycleHTTPFallback");
    assert_eq!(
        rec.message,
        "request to HTTPS lifecycle hook 10.1.0.5:8443 got HTTP response, retry with HTTP succeeded"
    );
    let note = crate::kubernetes::events::note(&ev, rec);
    assert_eq!(note.involved.field_path, "", "the pod, no container");
    assert_eq!(
        (note.involved.name.as_str(), note.involved.uid.as_str()),
        ("p", "u")
    );
    assert!(!ev.on_watch());
}
