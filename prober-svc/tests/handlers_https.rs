//! HTTPS probes (H4): a self-signed certificate is accepted (kubelet's InsecureSkipVerify), and
//! HTTP/2 is used when the server picks it through ALPN, HTTP/1.1 otherwise.

#[path = "support/handlers.rs"]
mod support;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use support::{prober, spec, target};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

type Seen = Arc<Mutex<Vec<(http::Version, Option<String>, Option<String>)>>>;

/// A TLS server with a fresh self-signed certificate offering `alpn`; records (version, UA, host).
async fn tls_server(alpn: &[&[u8]]) -> (u16, Seen, tokio::task::JoinHandle<()>) {
    tls_server_padded(alpn, 0).await
}

/// [`tls_server`] whose answers carry an `x-pad` header of `pad` bytes (none if 0).
async fn tls_server_padded(alpn: &[&[u8]], pad: usize) -> (u16, Seen, tokio::task::JoinHandle<()>) {
    let cert = rcgen::generate_simple_self_signed(vec!["probe.test".to_owned()]).expect("cert");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("server config");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen2.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(sock).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let header = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned)
                        };
                        let host =
                            header("host").or_else(|| req.uri().authority().map(|a| a.to_string()));
                        seen.lock()
                            .push((req.version(), header("user-agent"), host));
                        async move {
                            let mut resp =
                                http::Response::new(Full::new(Bytes::from_static(b"tls ok")));
                            if pad > 0 {
                                let v = http::HeaderValue::from_str(&"a".repeat(pad))
                                    .expect("header value");
                                resp.headers_mut().insert("x-pad", v);
                            }
                            Ok::<_, Infallible>(resp)
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, seen, task)
}

fn https(port: u16) -> Handler {
    Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Https,
        host: None,
        path: "/secure".into(),
        port: PortRef::Number(port.into()),
        headers: vec![],
    })
}

#[tokio::test]
async fn https_self_signed_http1_succeeds() {
    let (port, seen, task) = tls_server(&[b"http/1.1"]).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 2),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("tls ok".into()));
    let seen = seen.lock().clone();
    assert_eq!(seen[0].0, http::Version::HTTP_11);
    assert_eq!(seen[0].1.as_deref(), Some("kube-probe/1.33"));
    task.abort();
}

#[tokio::test]
async fn https_self_signed_h2_via_alpn_succeeds() {
    let (port, seen, task) = tls_server(&[b"h2", b"http/1.1"]).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 2),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("tls ok".into()));
    let seen = seen.lock().clone();
    assert_eq!(seen[0].0, http::Version::HTTP_2);
    assert_eq!(seen[0].2, Some(format!("127.0.0.1:{port}")));
    task.abort();
}

#[tokio::test]
async fn https_to_a_plain_http_server_fails() {
    let srv = support::RawServer::start(|_| support::response(200, &[], b"plain")).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(srv.port()), 1),
            &target(&[], &[]),
        )
        .await;
    match v {
        Outcome::Failure(output) => {
            assert!(
                output.starts_with(&format!(
                    "Get \"https://127.0.0.1:{}/secure\": ",
                    srv.port()
                )),
                "{output}"
            );
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn an_http_answer_to_the_handshake_is_gos_scheme_mismatch() {
    // A plain HTTP server answers a ClientHello as Go's net/http server does.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request")
                .await;
        }
    });
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 1),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(
        v,
        Outcome::Failure(format!(
            "Get \"https://127.0.0.1:{port}/secure\": http: server gave HTTP response to HTTPS client"
        ))
    );
    task.abort();
}

#[tokio::test]
async fn h2_response_headers_are_limited_as_gos_not_at_hypers_16_kib() {
    // Go's HTTP/2 client takes header lists up to its 10 MiB MaxResponseHeaderBytes; hyper's
    // default is 16 KiB.
    let (port, seen, task) = tls_server_padded(&[b"h2"], 100_000).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 2),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("tls ok".into()));
    assert_eq!(seen.lock()[0].0, http::Version::HTTP_2);
    task.abort();
}
