//! Probe handlers against hostile specs: every URL that cannot be built is a probe *error*
//! (kubelet's `formatURL` + `http.NewRequest` failing: retried, then discarded — never a
//! Failure, never a kill).

#[path = "support/handlers.rs"]
mod support;

use std::sync::atomic::Ordering;

use podward_prober::handler::host_policy::{HostPolicy, NodePolicy};
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeType};
use support::{LOCALHOST, RawServer, response, result, run, spec, target};

fn get_host(host: &str, port: u16) -> Handler {
    Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: Some(host.to_owned()),
        path: "/healthz".into(),
        port: PortRef::Number(port.into()),
        headers: vec![],
    })
}

#[tokio::test]
async fn h7_a_host_go_cannot_parse_is_a_probe_error_never_a_failure() {
    let server = RawServer::start(|_| response(500, &[], b"")).await;
    let v = run(get_host("bad host\r\nX: y", 8080)).await;
    // Go's `net.JoinHostPort` brackets a host with a colon in it.
    assert_eq!(
        v,
        Outcome::Errored(
            r#"parse "http://[bad%20host%0D%0AX:%20y]:8080/healthz": invalid URL escape "%20""#
                .into()
        )
    );
    // Every byte Go escapes in a host, an ASCII one, makes the URL unparseable; the rest is sent.
    for (host, escape) in [
        ("127.0.0.1\r\nX-Injected: 1", "%0D"),
        ("127.0.0.1/x", "%2F"),
        ("user@127.0.0.1", "%40"),
        ("127.0.0.1?q", "%3F"),
        ("127.0.0.1#f", "%23"),
        ("a\\b", "%5C"),
        ("a{b}", "%7B"),
        ("a|b", "%7C"),
        ("a^b", "%5E"),
        ("a`b", "%60"),
        ("tab\there", "%09"),
        ("nul\0", "%00"),
    ] {
        match run(get_host(host, server.port())).await {
            Outcome::Errored(message) => assert!(
                message.ends_with(&format!("invalid URL escape \"{escape}\"")),
                "{host:?}: {message}"
            ),
            other => panic!("{host:?}: {other:?}"),
        }
    }
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        0,
        "no request left the prober"
    );
    // What Go's parser accepts is probed as usual (here: a 500 is a Failure).
    for ok in ["127.0.0.1", "localhost"] {
        match run(get_host(ok, server.port())).await {
            Outcome::Success(_) | Outcome::Warning(_) | Outcome::Failure(_) => {}
            other => panic!("{ok:?}: {other:?}"),
        }
    }
}

/// A prober with `policy` on a node whose IP is not the target's: the probed pod is not
/// hostNetwork.
fn prober_with(policy: HostPolicy) -> podward_prober::probing::probe::Prober {
    support::prober().with_host_policy(NodePolicy::new(policy, "10.255.0.1".parse().expect("ip")))
}

async fn run_with(policy: HostPolicy, handler: Handler) -> Outcome {
    prober_with(policy)
        .probe(ProbeType::Liveness, &spec(handler, 1), &target(&[], &[]))
        .await
}

#[tokio::test]
async fn a_host_that_resolves_to_loopback_is_a_probe_error_under_deny_local() {
    let server = RawServer::start(|_| response(200, &[], b"node secret")).await;
    // `localhost` is a name: it is decided on the address it resolves to, when dialled.
    for handler in [
        get_host("localhost", server.port()),
        get_host("127.0.0.1", server.port()),
        Handler::TcpSocket {
            host: Some("localhost".into()),
            port: PortRef::Number(server.port().into()),
        },
    ] {
        match run_with(HostPolicy::DenyLocal, handler.clone()).await {
            Outcome::Errored(message) => assert!(
                message.contains("loopback address denied by --probe-host-policy=deny-local"),
                "{message}"
            ),
            other => panic!("{handler:?}: {other:?}"),
        }
    }
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        0,
        "no connection reached the denied address"
    );
    // kubelet's policy reaches it, and still does not show the body.
    let v = run_with(HostPolicy::Allow, get_host("localhost", server.port())).await;
    let (res, output, _) = result(&v);
    assert_eq!(res, podward_prober::model::outcome::ProbeResult::Success);
    assert!(!output.contains("secret"), "{output}");
    // A hostNetwork pod (probed at the node IP) shares the node's loopback: allowed.
    let hostnet = support::prober()
        .with_host_policy(NodePolicy::new(HostPolicy::DenyLocal, LOCALHOST))
        .probe(
            ProbeType::Liveness,
            &spec(get_host("localhost", server.port()), 1),
            &target(&[], &[]),
        )
        .await;
    assert!(
        matches!(
            hostnet,
            Outcome::Success(_) | Outcome::Warning(_) | Outcome::Failure(_)
        ),
        "{hostnet:?}"
    );
}
