//! Probe handlers against hostile specs: every URL that cannot be built is a probe *error*
//! (kubelet's `formatURL` + `http.NewRequest` failing: retried, then discarded — never a
//! Failure, never a kill).

mod handlers_support;

use std::sync::atomic::Ordering;

use handlers_support::{RawServer, response, run};
use podward_prober::runner::ProbeVerdict;
use podward_prober::spec::{Handler, HttpGetSpec, HttpScheme, PortRef};

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
    assert_eq!(
        v,
        ProbeVerdict::Errored {
            // Go's `net.JoinHostPort` brackets a host with a colon in it.
            message: r#"parse "http://[bad%20host%0D%0AX:%20y]:8080/healthz": invalid URL escape "%20""#
                .into()
        }
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
            ProbeVerdict::Errored { message } => assert!(
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
            ProbeVerdict::Result { .. } => {}
            other => panic!("{ok:?}: {other:?}"),
        }
    }
}
