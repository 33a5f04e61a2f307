//! `--probe-host-policy` is checked on every redirect hop, not just the first request: a name
//! may resolve elsewhere on the next hop (DNS rebinding). Test servers are all on loopback, so
//! the hop is told apart by its port (Go follows a same-host redirect to another port).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{HttpError, HttpProber};
use crate::handler::attempt::{Answer, ProbeTarget};
use crate::handler::host_policy::Guard;
use crate::handler::resolve::{Names, Resolver, ResolverOptions};
use crate::spec::{HttpGetSpec, HttpScheme, PortRef};

/// A server answering every request with `reply`; counts connections.
async fn serve(reply: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

/// The probes' resolver with its defaults (these tests dial IP literals only).
fn resolver() -> Resolver {
    Resolver::new(ResolverOptions::default())
}

fn reply(status: u16, location: Option<&str>, body: &str) -> String {
    let location = location.map_or(String::new(), |l| format!("Location: {l}\r\n"));
    format!(
        "HTTP/1.1 {status} X\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn get(host: &str, port: u16) -> HttpGetSpec {
    HttpGetSpec {
        scheme: HttpScheme::Http,
        host: Some(host.to_owned()),
        path: "/healthz".into(),
        port: PortRef::Number(port.into()),
        headers: vec![],
    }
}

const TARGET: ProbeTarget<'static> = ProbeTarget {
    host_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
    container_id: "c",
    ports: &[],
    env: &[],
};

#[tokio::test]
async fn every_redirect_hop_is_checked_against_the_host_policy() {
    let (denied, denied_seen) = serve(reply(200, None, "secret of the denied hop")).await;
    let to = format!("http://127.0.0.1:{denied}/other");
    let (first, first_seen) = serve(reply(302, Some(&to), "")).await;
    let prober = HttpProber::new("kube-probe/1.33");
    let got = prober
        .probe(
            &get("127.0.0.1", first),
            Duration::from_secs(2),
            &TARGET,
            Guard::denying_port(denied),
            None,
            Names::new(&resolver(), "pod"),
        )
        .await;
    match got {
        Err(HttpError::Denied { url, error }) => {
            assert_eq!(url, to);
            assert!(error.is_denied(), "{error}");
        }
        other => panic!("the second hop was not refused: {other:?}"),
    }
    assert_eq!(first_seen.load(Ordering::SeqCst), 1, "the first hop ran");
    assert_eq!(
        denied_seen.load(Ordering::SeqCst),
        0,
        "nothing reached the denied hop"
    );
}

#[tokio::test]
async fn the_body_of_a_probe_that_names_a_host_is_never_shown() {
    let (ok, _) = serve(reply(200, None, "node secret")).await;
    let prober = HttpProber::new("kube-probe/1.33");
    let timeout = Duration::from_secs(2);
    let resolver = resolver();
    let names = Names::new(&resolver, "pod");
    let got = prober
        .probe(
            &get("127.0.0.1", ok),
            timeout,
            &TARGET,
            Guard::OPEN,
            None,
            names,
        )
        .await
        .expect("probe");
    assert_eq!(got, Answer::Success(String::new()));
    // A redirect to another host ends the probe with kubelet's warning, minus the body.
    let (away, _) = serve(reply(302, Some("http://10.0.0.9/"), "node secret")).await;
    let got = prober
        .probe(
            &get("127.0.0.1", away),
            timeout,
            &TARGET,
            Guard::OPEN,
            None,
            names,
        )
        .await
        .expect("probe");
    match got {
        Answer::Warning(text) => assert!(!text.contains("secret"), "{text}"),
        other => panic!("{other:?}"),
    }
    // Without a host (the pod's own IP) the body is kubelet's output, shown in full.
    let mut own = get("127.0.0.1", ok);
    own.host = None;
    let got = prober
        .probe(&own, timeout, &TARGET, Guard::OPEN, None, names)
        .await
        .expect("probe");
    assert_eq!(got, Answer::Success("node secret".into()));
}

/// The exchange is boxed on its own per probe: it must stay within glibc's per-thread cache
/// (see `probing/probe/tests.rs`).
#[test]
fn an_http_exchanges_box_fits_the_allocators_cache() {
    let prober = HttpProber::new("kube-probe/1.33");
    let resolver = resolver();
    let url = super::url::ProbeUrl::for_probe(HttpScheme::Http, "127.0.0.1", 8080, "/healthz");
    let host = http::HeaderValue::from_static("127.0.0.1:8080");
    let get = super::exchange::get(
        &url,
        &prober.default_headers,
        &host,
        None,
        &prober.tls,
        tokio::time::Instant::now(),
        super::exchange::Bounds {
            guard: Guard::OPEN,
            meter: None,
            names: Names::new(&resolver, "pod"),
        },
    );
    let size = std::mem::size_of_val(&get);
    assert!(
        size <= 1032 - 8,
        "an HTTP exchange's future is {size} bytes"
    );
}
