//! HTTP probe acceptance item H2: redirects, against real local servers.

#[path = "support/handlers.rs"]
mod support;

use std::sync::atomic::Ordering;

use podward_prober::model::outcome::ProbeResult;
use support::{RawServer, get, response, result, run};

// --- H2: redirects ---

#[tokio::test]
async fn h2_non_local_redirect_is_a_warning_with_kubelets_text() {
    let body = br#"<a href="http://0.0.0.0/">Found</a>."#;
    let srv =
        RawServer::start(move |_| response(302, &[("Location", "http://0.0.0.0/")], body)).await;
    let v = run(get(srv.port(), "/redirect?loc=http://0.0.0.0/", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Success,
            r#"Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>."#,
            true
        )
    );
    assert_eq!(
        srv.requests().len(),
        1,
        "the other host must not be contacted"
    );
}

#[tokio::test]
async fn h2_local_redirects_are_followed_for_every_redirect_code() {
    for code in [301u16, 302, 303, 307, 308] {
        let srv = RawServer::start(move |r| match r.path() {
            "/redirect" => response(code, &[("Location", "/healthz")], b""),
            "/healthz" => response(200, &[], b"healthy"),
            _ => response(404, &[], b""),
        })
        .await;
        let v = run(get(srv.port(), "/redirect", &[])).await;
        assert_eq!(
            result(&v),
            (ProbeResult::Success, "healthy", false),
            "code {code}"
        );
        assert_eq!(
            srv.connections.load(Ordering::SeqCst),
            2,
            "one fresh connection per hop"
        );
        let second = &srv.requests()[1];
        assert_eq!(
            second.values("Referer"),
            vec![format!("http://127.0.0.1:{}/redirect", srv.port())]
        );
    }
}

#[tokio::test]
async fn h2_local_redirect_to_failing_path_fails() {
    let srv = RawServer::start(|r| match r.path() {
        "/redirect" => response(302, &[("Location", "/fail")], b""),
        _ => response(500, &[], b""),
    })
    .await;
    let v = run(get(srv.port(), "/redirect", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 500",
            false
        )
    );
}

#[tokio::test]
async fn h2_same_hostname_other_port_is_followed() {
    let other = RawServer::start(|_| response(200, &[], b"new port")).await;
    let loc = format!("http://127.0.0.1:{}/ok", other.port());
    let srv = RawServer::start(move |_| response(302, &[("Location", &loc)], b"")).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "new port", false));
    assert_eq!(
        other.requests()[0].values("Host"),
        vec![format!("127.0.0.1:{}", other.port())]
    );
}

#[tokio::test]
async fn h2_redirect_loop_stops_after_10_requests() {
    let srv = RawServer::start(|_| response(302, &[("Location", "/loop")], b"")).await;
    let v = run(get(srv.port(), "/loop", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            r#"Get "/loop": stopped after 10 redirects"#,
            false
        )
    );
    assert_eq!(srv.requests().len(), 10);
}

#[tokio::test]
async fn h2_host_header_preserved_across_relative_redirect() {
    let srv = RawServer::start(|r| match r.path() {
        "/redirect" => response(302, &[("Location", "/healthz")], b""),
        _ => response(200, &[], b"ok"),
    })
    .await;
    let v = run(get(srv.port(), "/redirect", &[("Host", "example.com")])).await;
    assert_eq!(result(&v).0, ProbeResult::Success);
    let reqs = srv.requests();
    assert_eq!(reqs[0].values("Host"), vec!["example.com"]);
    assert_eq!(reqs[1].values("Host"), vec!["example.com"]);
}

#[tokio::test]
async fn h2_unsupported_scheme_redirect_other_host_warns_same_host_fails() {
    let srv = RawServer::start(|r| match r.path() {
        "/other" => response(
            302,
            &[("Location", "ftp://files.example/x")],
            b"ftp elsewhere",
        ),
        _ => response(302, &[("Location", "ftp://127.0.0.1/x")], b""),
    })
    .await;
    let v = run(get(srv.port(), "/other", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Success,
            "Probe terminated redirects, Response body: ftp elsewhere",
            true
        )
    );
    let v = run(get(srv.port(), "/same", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Failure,
            format!(
                r#"Get "http://127.0.0.1:{}/same": unsupported protocol scheme "ftp""#,
                srv.port()
            )
            .as_str(),
            false
        )
    );
}
