//! TCP probe acceptance item T1 against real sockets.

#[path = "support/handlers.rs"]
mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::model::container_port::ContainerPort;
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, PortRef, ProbeType};
use support::{prober, spec, target, unanswering_listener};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

fn tcp(host: Option<&str>, port: PortRef) -> Handler {
    Handler::TcpSocket {
        host: host.map(str::to_owned),
        port,
    }
}

#[tokio::test]
async fn t1_open_port_succeeds_and_sends_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(tcp(None, PortRef::Number(port.into())), 1),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(v, Outcome::Success(String::new()));
    let (mut sock, _) = tokio::time::timeout(Duration::from_secs(2), listener.accept())
        .await
        .expect("accepted")
        .expect("accept");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), sock.read(&mut buf))
        .await
        .expect("closed")
        .expect("read");
    assert_eq!(n, 0, "the probe closes at once without sending data");
}

#[tokio::test]
async fn t1_refused_port_fails_with_go_text() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(tcp(None, PortRef::Number(port.into())), 1),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(
        v,
        Outcome::Failure(format!(
            "dial tcp 127.0.0.1:{port}: connect: connection refused"
        ))
    );
}

#[tokio::test]
async fn t1_unanswered_connect_times_out_within_the_timeout() {
    // A listener with a full accept queue drops further SYNs, so the connect hangs.
    let (_sock, addr, _fillers) = unanswering_listener().await;
    let started = Instant::now();
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(tcp(None, PortRef::Number(addr.port().into())), 1),
            &target(&[], &[]),
        )
        .await;
    let elapsed = started.elapsed();
    assert_eq!(v, Outcome::Failure(format!("dial tcp {addr}: i/o timeout")));
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_millis(2500),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn t1_host_override_and_named_port_are_honoured() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let ports = [ContainerPort {
        name: "probe".into(),
        container_port: port.into(),
        protocol: "TCP".into(),
    }];
    // The pod IP is a TEST-NET address nothing answers on: success proves the host field was used.
    let t = ProbeTarget {
        host_ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        container_id: "c",
        ports: &ports,
        env: &[],
    };
    let v = prober()
        .probe(
            ProbeType::Readiness,
            &spec(tcp(Some("127.0.0.1"), PortRef::Name("probe".into())), 1),
            &t,
        )
        .await;
    assert_eq!(v, Outcome::Success(String::new()));
    let v = prober()
        .probe(
            ProbeType::Readiness,
            &spec(tcp(Some("localhost"), PortRef::Number(port.into())), 1),
            &t,
        )
        .await;
    assert!(
        matches!(v, Outcome::Success(_) | Outcome::Warning(_)),
        "{v:?}"
    );
}

#[tokio::test]
async fn t1_unresolvable_port_errors() {
    let v = prober()
        .probe(
            ProbeType::Readiness,
            &spec(tcp(None, PortRef::Name("nope".into())), 1),
            &target(&[], &[]),
        )
        .await;
    assert_eq!(
        v,
        Outcome::Errored(r#"strconv.Atoi: parsing "nope": invalid syntax"#.into())
    );
}
