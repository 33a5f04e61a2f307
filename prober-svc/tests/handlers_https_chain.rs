//! HTTPS probes against servers whose certificate chain is as large as Go's client takes: kubelet's
//! Go client accepts a Certificate handshake message up to 256 KiB (and fails past it with its own
//! text); rustls refuses any handshake message over 64 KiB, so such a handshake is redone with
//! OpenSSL configured as Go's client. A usual chain never leaves rustls.

#[path = "support/handlers.rs"]
mod support;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use podward_prober::handler::target_budget::TargetBudget;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use prometheus::IntCounter;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use support::{prober, spec, target};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

type Seen = Arc<Mutex<Vec<http::Version>>>;

/// A self-signed certificate whose DER is about `size` bytes (a private extension pads it).
fn padded_cert(size: usize) -> CertificateDer<'static> {
    let mut params =
        rcgen::CertificateParams::new(vec!["pad.probe.test".to_owned()]).expect("params");
    if size > 1024 {
        let n = size - 1024;
        // The extension's value: one DER OCTET STRING of zeros.
        let mut value = vec![0x04, 0x83, (n >> 16) as u8, (n >> 8) as u8, n as u8];
        value.resize(5 + n, 0);
        params
            .custom_extensions
            .push(rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 55555, 1],
                value,
            ));
    }
    let key = rcgen::KeyPair::generate().expect("key");
    params.self_signed(&key).expect("cert").der().clone()
}

/// The Certificate message's length (what Go's limit is checked against) for `chain`. TLS 1.3,
/// each entry without extensions: context (1), list length (3), each entry's length (3),
/// certificate, and extensions length (2); TLS 1.2: list length (3), each entry's length (3)
/// and certificate.
fn certificate_message_len(chain: &[CertificateDer<'_>], tls12: bool) -> usize {
    if tls12 {
        3 + chain.iter().map(|c| 3 + c.len()).sum::<usize>()
    } else {
        1 + 3 + chain.iter().map(|c| 3 + c.len() + 2).sum::<usize>()
    }
}

/// A TLS server (rustls: its server side has no cap on what it sends) presenting a leaf plus
/// intermediates padding its chain to about `chain_bytes`, offering `alpn`; records the
/// HTTP version of each request. Returns the Certificate message's length too.
async fn chain_server(
    alpn: &[&[u8]],
    chain_bytes: usize,
) -> (u16, Seen, usize, tokio::task::JoinHandle<()>) {
    chain_server_versions(alpn, chain_bytes, false).await
}

/// [`chain_server`] speaking TLS 1.2 only if `tls12`.
async fn chain_server_versions(
    alpn: &[&[u8]],
    chain_bytes: usize,
    tls12: bool,
) -> (u16, Seen, usize, tokio::task::JoinHandle<()>) {
    let leaf = rcgen::generate_simple_self_signed(vec!["probe.test".to_owned()]).expect("cert");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_pair.serialize_der()));
    let mut chain = vec![leaf.cert.der().clone()];
    // Intermediates of at most 60 KB each, until the chain has `chain_bytes` (and at most a
    // small certificate more).
    let mut total = chain[0].len();
    while total < chain_bytes {
        let pad = padded_cert((chain_bytes - total).clamp(1500, 60_000));
        total += pad.len();
        chain.push(pad);
    }
    let msg_len = certificate_message_len(&chain, tls12);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ));
    let builder = if tls12 {
        builder.with_protocol_versions(&[&rustls::version::TLS12])
    } else {
        builder.with_safe_default_protocol_versions()
    };
    let mut config = builder
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
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
                        seen.lock().push(req.version());
                        async move {
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                                b"chain ok",
                            ))))
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, seen, msg_len, task)
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

fn fallback_counter() -> IntCounter {
    IntCounter::new("podward_prober_tls_fallback_total", "test").expect("counter")
}

#[tokio::test]
async fn a_200_kib_chain_succeeds_over_http1() {
    let (port, seen, msg_len, task) = chain_server(&[b"http/1.1"], 200 << 10).await;
    assert!(msg_len > 200 << 10 && msg_len < 210 << 10, "{msg_len}");
    let fallbacks = fallback_counter();
    let v = prober()
        .with_tls_fallbacks(fallbacks.clone())
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("chain ok".into()));
    assert_eq!(seen.lock().clone(), vec![http::Version::HTTP_11]);
    assert_eq!(fallbacks.get(), 1, "the handshake was redone once");
    task.abort();
}

#[tokio::test]
async fn a_200_kib_chain_succeeds_over_h2() {
    let (port, seen, _, task) = chain_server(&[b"h2", b"http/1.1"], 200 << 10).await;
    let fallbacks = fallback_counter();
    let v = prober()
        .with_tls_fallbacks(fallbacks.clone())
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("chain ok".into()));
    assert_eq!(seen.lock().clone(), vec![http::Version::HTTP_2]);
    assert_eq!(fallbacks.get(), 1);
    task.abort();
}

#[tokio::test]
async fn a_chain_just_over_rustls_cap_succeeds() {
    // 64 KiB and a little: rustls may report this one as a full message buffer rather than a
    // too-large payload; both are the same overflow.
    for size in [(64 << 10) + 200, (64 << 10) + 4000, 70 << 10] {
        let (port, _, _, task) = chain_server(&[b"http/1.1"], size).await;
        let fallbacks = fallback_counter();
        let v = prober()
            .with_tls_fallbacks(fallbacks.clone())
            .probe(
                ProbeType::Liveness,
                &spec(https(port), 5),
                &target(&[], &[]),
            )
            .await;
        assert_eq!(
            v,
            Outcome::Success("chain ok".into()),
            "chain of {size} bytes"
        );
        assert_eq!(fallbacks.get(), 1, "chain of {size} bytes");
        task.abort();
    }
}

#[tokio::test]
async fn a_chain_over_gos_256_kib_fails_with_gos_text() {
    let (port, seen, msg_len, task) = chain_server(&[b"h2", b"http/1.1"], 300 << 10).await;
    assert!(msg_len > 256 << 10, "{msg_len}");
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(
        v,
        Outcome::Failure(format!(
            "Get \"https://127.0.0.1:{port}/secure\": tls: handshake message of length {msg_len} bytes exceeds maximum of 262144 bytes"
        ))
    );
    assert!(seen.lock().is_empty());
    task.abort();
}

#[tokio::test]
async fn a_usual_chain_never_leaves_rustls() {
    let (port, seen, _, task) = chain_server(&[b"h2", b"http/1.1"], 30 << 10).await;
    let fallbacks = fallback_counter();
    let v = prober()
        .with_tls_fallbacks(fallbacks.clone())
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("chain ok".into()));
    assert_eq!(seen.lock().clone(), vec![http::Version::HTTP_2]);
    assert_eq!(fallbacks.get(), 0);
    task.abort();
}

#[tokio::test]
async fn the_redone_handshake_is_charged_to_the_nodes_budget() {
    let (port, _, msg_len, task) = chain_server(&[b"http/1.1"], 200 << 10).await;
    let budget = TargetBudget::new(64 << 20, None);
    let v = prober()
        .with_target_budget(budget.clone())
        .probe_for_pod(
            "pod-a",
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("chain ok".into()));
    // Only the second connection read the whole chain: it was charged.
    assert!(
        budget.peak() >= msg_len,
        "peak {} < {msg_len}",
        budget.peak()
    );
    assert_eq!(budget.used(), 0, "everything given back");
    task.abort();
}

#[tokio::test]
async fn over_tls12_a_200_kib_chain_succeeds_and_a_larger_one_fails_with_gos_text() {
    let (port, seen, _, task) = chain_server_versions(&[b"h2"], 200 << 10, true).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success("chain ok".into()));
    assert_eq!(seen.lock().clone(), vec![http::Version::HTTP_2]);
    task.abort();

    let (port, _, msg_len, task) = chain_server_versions(&[b"http/1.1"], 300 << 10, true).await;
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 5),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(
        v,
        Outcome::Failure(format!(
            "Get \"https://127.0.0.1:{port}/secure\": tls: handshake message of length {msg_len} bytes exceeds maximum of 262144 bytes"
        ))
    );
    task.abort();
}

#[tokio::test]
async fn the_redone_handshake_is_bounded_by_the_probes_one_deadline() {
    // The first connection presents a 200 KiB chain (rustls refuses it); the second is accepted
    // and never answered: the probe fails at its timeout, as Go's client stuck in its handshake.
    let leaf = rcgen::generate_simple_self_signed(vec!["probe.test".to_owned()]).expect("cert");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_pair.serialize_der()));
    let mut chain = vec![leaf.cert.der().clone()];
    for _ in 0..4 {
        chain.push(padded_cert(52_000));
    }
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let (first, _) = listener.accept().await.expect("first");
        tokio::spawn(async move {
            let _ = acceptor.accept(first).await;
        });
        let (silent, _) = listener.accept().await.expect("second");
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        drop(silent);
    });
    let fallbacks = fallback_counter();
    let started = tokio::time::Instant::now();
    let v = prober()
        .with_tls_fallbacks(fallbacks.clone())
        .probe(
            ProbeType::Liveness,
            &spec(https(port), 1),
            &target(&[], &[]),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(
        v,
        Outcome::Failure(format!(
            "Get \"https://127.0.0.1:{port}/secure\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        ))
    );
    assert_eq!(fallbacks.get(), 1);
    assert!(
        took < std::time::Duration::from_millis(1900),
        "one deadline for both handshakes: took {took:?}"
    );
    task.abort();
}

#[tokio::test]
async fn a_certificate_message_just_under_rustls_cap_succeeds() {
    // A Certificate message a little under 64 KiB: its records' headers and encryption overhead
    // fill rustls' 64 KiB buffer before the message is whole, which rustls reports as "message
    // buffer full" rather than as a too-large message. Go takes it; so does the fallback.
    let mut redone_under_the_cap = 0;
    for size in [65_000, 65_100, 65_200, 65_280] {
        let (port, _, msg_len, task) = chain_server(&[b"http/1.1"], size).await;
        let fallbacks = fallback_counter();
        let v = prober()
            .with_tls_fallbacks(fallbacks.clone())
            .probe(
                ProbeType::Liveness,
                &spec(https(port), 5),
                &target(&[], &[]),
            )
            .await;
        assert_eq!(
            v,
            Outcome::Success("chain ok".into()),
            "message of {msg_len} bytes"
        );
        if msg_len <= 0xffff && fallbacks.get() == 1 {
            redone_under_the_cap += 1;
        }
        task.abort();
    }
    assert!(
        redone_under_the_cap > 0,
        "no message under the cap filled rustls' buffer"
    );
}
