//! HTTP probe acceptance items H1–H6 against real local servers.

#[path = "support/handlers.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use podward_prober::model::container_port::ContainerPort;
use podward_prober::model::outcome::Outcome;
use podward_prober::model::outcome::ProbeResult;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use support::{
    RawServer, Reply, get, prober, response, result, run, spec, target, unanswering_listener,
};

// --- H1: result mapping and body limit ---

#[tokio::test]
async fn h1_2xx_is_success_with_body() {
    let srv = RawServer::start(|_| response(200, &[], b"ok body")).await;
    let v = run(get(srv.port(), "/healthz", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "ok body", false));
    let srv = RawServer::start(|_| response(204, &[], b"")).await;
    assert_eq!(
        result(&run(get(srv.port(), "/", &[])).await).0,
        ProbeResult::Success
    );
}

#[tokio::test]
async fn h1_body_truncated_at_10240_bytes_without_error() {
    let srv = RawServer::start(|_| response(200, &[], &[b'a'; 10241])).await;
    let v = run(get(srv.port(), "/", &[])).await;
    let (r, out, _) = result(&v);
    assert_eq!((r, out.len()), (ProbeResult::Success, 10240));
    let srv = RawServer::start(|_| response(200, &[], &[b'b'; 10239])).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v).1.len(), 10239);
}

#[tokio::test]
async fn h1_4xx_5xx_and_1xx_are_failures_without_body() {
    for code in [400u16, 404, 500, 503] {
        let srv = RawServer::start(move |_| response(code, &[], b"secret body")).await;
        let v = run(get(srv.port(), "/", &[])).await;
        assert_eq!(
            result(&v),
            (
                ProbeResult::Failure,
                format!("HTTP probe failed with statuscode: {code}").as_str(),
                false
            )
        );
    }
}

#[tokio::test]
async fn h1_unfollowed_3xx_is_a_warning_with_body() {
    // 300 is not a redirect Go follows; the 3xx itself is the answer.
    let srv = RawServer::start(|_| response(300, &[("Location", "/elsewhere")], b"choices")).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Success,
            "Probe terminated redirects, Response body: choices",
            true
        )
    );
    // A 302 without Location is returned as is too.
    let srv = RawServer::start(|_| response(302, &[], b"nowhere")).await;
    assert!(result(&run(get(srv.port(), "/", &[])).await).2);
}

// --- H3: headers ---

#[tokio::test]
async fn h3_default_request_is_kubelets() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    run(get(srv.port(), "/healthz", &[])).await;
    let req = &srv.requests()[0];
    assert_eq!(req.line, "GET /healthz HTTP/1.1");
    let names: Vec<&str> = req.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        vec!["Host", "User-Agent", "Accept", "Connection"],
        "order and case as Go writes them"
    );
    assert_eq!(
        req.values("Host"),
        vec![format!("127.0.0.1:{}", srv.port())]
    );
    assert_eq!(req.values("User-Agent"), vec!["kube-probe/1.33"]);
    assert_eq!(req.values("Accept"), vec!["*/*"]);
    assert_eq!(req.values("Connection"), vec!["close"]);
    assert!(
        req.values("Accept-Encoding").is_empty(),
        "compression is disabled"
    );
}

#[tokio::test]
async fn h3_user_headers_canonicalised_sorted_and_duplicates_kept() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    let headers = [
        ("x-cUSTOM-header", "one"),
        ("Accept", "application/json"),
        ("X-Custom-Header", "two"),
        ("a-first", "1"),
    ];
    run(get(srv.port(), "/", &headers)).await;
    let req = &srv.requests()[0];
    let lines: Vec<(&str, &str)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        lines[1..],
        [
            ("User-Agent", "kube-probe/1.33"),
            ("A-First", "1"),
            ("Accept", "application/json"),
            ("X-Custom-Header", "one"),
            ("X-Custom-Header", "two"),
            ("Connection", "close"),
        ]
    );
}

#[tokio::test]
async fn h3_user_agent_and_accept_overrides_and_empty_values() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    run(get(
        srv.port(),
        "/",
        &[("User-Agent", "my-agent"), ("Accept", "text/plain")],
    ))
    .await;
    run(get(srv.port(), "/", &[("User-Agent", ""), ("Accept", "")])).await;
    let reqs = srv.requests();
    assert_eq!(reqs[0].values("User-Agent"), vec!["my-agent"]);
    assert_eq!(reqs[0].values("Accept"), vec!["text/plain"]);
    assert!(
        reqs[1].values("User-Agent").is_empty(),
        "empty UA is omitted"
    );
    assert!(
        reqs[1].values("Accept").is_empty(),
        "empty Accept is omitted"
    );
}

#[tokio::test]
async fn h3_host_header_sets_request_host() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    run(get(srv.port(), "/", &[("HOST", "virtual.example")])).await;
    let req = &srv.requests()[0];
    assert_eq!(req.values("Host"), vec!["virtual.example"]);
    assert_eq!(
        req.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
            .count(),
        1
    );
}

// --- H4: connection handling ---

#[tokio::test]
async fn h4_every_probe_uses_a_new_connection() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    for _ in 0..3 {
        run(get(srv.port(), "/", &[])).await;
    }
    assert_eq!(srv.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn h4_probe_socket_lingers_one_second() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let stream = podward_prober::handler::dialer::dial_addr(addr, deadline)
        .await
        .expect("dial");
    let sock = socket2::SockRef::from(&stream);
    assert_eq!(sock.linger().expect("linger"), Some(Duration::from_secs(1)));
    assert!(sock.tcp_nodelay().expect("nodelay"));
}

// --- H5: errors, timeouts, URL ---

#[tokio::test]
async fn h5_timeout_is_a_failure_with_go_text_within_the_timeout() {
    let srv = RawServer::start(|_| {
        Reply::After(Duration::from_secs(3), b"HTTP/1.1 200 OK\r\n\r\n".to_vec())
    })
    .await;
    let started = Instant::now();
    let v = run(get(srv.port(), "/", &[])).await;
    let elapsed = started.elapsed();
    let (r, out, _) = result(&v);
    assert_eq!(r, ProbeResult::Failure);
    assert_eq!(
        out,
        format!(
            r#"Get "http://127.0.0.1:{}/": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"#,
            srv.port()
        )
    );
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_millis(2500),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn h5_connection_refused_is_a_failure_with_go_text() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let v = run(get(port, "/healthz", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            format!(r#"Get "http://127.0.0.1:{port}/healthz": dial tcp 127.0.0.1:{port}: connect: connection refused"#)
                .as_str(),
            false
        )
    );
}

#[tokio::test]
async fn h5_unanswered_connect_is_a_dial_timeout_with_go_text_within_the_timeout() {
    // A listener with a full accept queue drops further SYNs, so the connect hangs: the probe's
    // one deadline ends it while dialling, and Go's client words that as a dial timeout.
    let (_sock, addr, _fillers) = unanswering_listener().await;
    let started = Instant::now();
    let v = run(get(addr.port(), "/", &[])).await;
    let elapsed = started.elapsed();
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            format!(
                r#"Get "http://{addr}/": dial tcp {addr}: i/o timeout (Client.Timeout exceeded while awaiting headers)"#
            )
            .as_str(),
            false
        )
    );
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_millis(2500),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn h5_path_with_query_is_sent_as_is() {
    let srv = RawServer::start(|_| response(200, &[], b"")).await;
    run(get(srv.port(), "?foo", &[])).await;
    run(get(srv.port(), "/path/x?a=1&b=two", &[])).await;
    run(get(srv.port(), "/with space#frag", &[])).await;
    let lines: Vec<String> = srv.requests().into_iter().map(|r| r.line).collect();
    assert_eq!(
        lines,
        [
            "GET /?foo HTTP/1.1",
            "GET /path/x?a=1&b=two HTTP/1.1",
            "GET /with%20space HTTP/1.1"
        ]
    );
}

#[tokio::test]
async fn h5_body_read_error_is_an_error_retried_three_times() {
    // Headers promise 100 bytes, the server closes after 5: Go's ReadAtMost fails => errored.
    let srv = RawServer::start(|_| {
        Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec())
    })
    .await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert!(matches!(v, Outcome::Errored(_)), "{v:?}");
    assert_eq!(srv.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn h5_server_closing_without_response_is_eof_failure() {
    let srv = RawServer::start(|_| Reply::Close).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            format!(r#"Get "http://127.0.0.1:{}/": EOF"#, srv.port()).as_str(),
            false
        )
    );
}

// --- H6: ports ---

#[tokio::test]
async fn h6_named_and_numeric_string_ports_resolve() {
    let srv = RawServer::start(|_| response(200, &[], b"named")).await;
    let ports = [ContainerPort {
        name: "http".into(),
        container_port: srv.port().into(),
        protocol: "TCP".into(),
    }];
    let handler = |port: PortRef| {
        Handler::HttpGet(HttpGetSpec {
            scheme: HttpScheme::Http,
            host: None,
            path: "/".into(),
            port,
            headers: vec![],
        })
    };
    let p = prober();
    let v = p
        .probe(
            ProbeType::Readiness,
            &spec(handler(PortRef::Name("http".into())), 1),
            &target(&ports, &[]),
        )
        .await;
    assert_eq!(result(&v).1, "named");
    let v = p
        .probe(
            ProbeType::Readiness,
            &spec(handler(PortRef::Name(srv.port().to_string())), 1),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(result(&v).1, "named");
}

#[tokio::test]
async fn h6_unresolvable_port_errors_without_connecting() {
    let handler = Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: None,
        path: "/".into(),
        port: PortRef::Name("http".into()),
        headers: vec![],
    });
    let v = run(handler).await;
    assert_eq!(
        v,
        Outcome::Errored(r#"strconv.Atoi: parsing "http": invalid syntax"#.into())
    );
}

#[tokio::test]
async fn h5_body_stalling_past_the_deadline_is_an_error_not_a_failure() {
    // Headers arrive, the body never completes: Go's ReadAtMost fails with the client timeout,
    // which kubelet returns as an error (retried, then discarded).
    // The raw server closes after writing; this one keeps every connection open.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut sock, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                .await;
            held.push(sock);
        }
    });
    let started = Instant::now();
    let v = run(get(port, "/", &[])).await;
    assert_eq!(
        v,
        Outcome::Errored(
            "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                .into()
        )
    );
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "three attempts of 1 s each"
    );
    server.abort();
}

#[test]
fn probe_future_is_send_so_workers_can_spawn_it() {
    fn assert_send<T: Send>(_: &T) {}
    let p = prober();
    let s = spec(get(1, "/", &[]), 1);
    let t = target(&[], &[]);
    let fut = p.probe(ProbeType::Liveness, &s, &t);
    assert_send(&fut);
}
