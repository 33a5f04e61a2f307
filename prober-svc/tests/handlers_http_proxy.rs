//! H4: HTTP probes ignore proxy settings in the environment (kubelet sets `Proxy: nil`).
//! The environment cannot be changed inside a threaded test process, so the test re-runs this
//! binary as a child with `HTTP_PROXY`/`http_proxy` pointing at a recording "proxy".

#[path = "support/handlers.rs"]
mod support;

use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use support::{RawServer, prober, response, spec, target};

const SERVER_PORT_ENV: &str = "PODWARD_TEST_PROXY_CHILD_SERVER_PORT";

#[tokio::test]
async fn h4_proxy_environment_is_ignored() {
    let server = RawServer::start(|_| response(200, &[], b"direct")).await;
    let proxy = RawServer::start(|_| response(200, &[], b"via proxy")).await;
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port());
    let status = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_probes_with_proxy_env", "--nocapture"])
        .env(SERVER_PORT_ENV, server.port().to_string())
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("HTTPS_PROXY", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .status()
        .await
        .expect("run child");
    assert!(status.success(), "child probe failed");
    assert_eq!(
        server.requests().len(),
        1,
        "the probe went straight to the server"
    );
    assert!(proxy.requests().is_empty(), "the proxy was not used");
}

/// Runs only as the child of the test above; a no-op otherwise.
#[tokio::test]
async fn child_probes_with_proxy_env() {
    let Ok(port) = std::env::var(SERVER_PORT_ENV) else {
        return;
    };
    let port: i32 = port.parse().expect("port");
    let handler = Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: None,
        path: "/".into(),
        port: PortRef::Number(port),
        headers: vec![],
    });
    let v = prober()
        .probe(ProbeType::Liveness, &spec(handler, 2), &target(&[], &[]))
        .await;
    assert_eq!(v, Outcome::Success("direct".into()));
}
