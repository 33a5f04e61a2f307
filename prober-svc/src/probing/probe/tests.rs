//! The size of what the worker allocates per probe.
//!
//! glibc serves allocations of up to 1,032 bytes from a per-thread cache in a few instructions;
//! a larger one takes its slow path, which first merges every small chunk freed since (a
//! measurable share of the prober's CPU at thousands of probes a second). The worker boxes each
//! probe's future, so that future, and each box a handler makes beneath it on every probe, must
//! stay under the limit.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use super::{Prober, ProberOptions};
use crate::handler::host_policy::Guard;
use crate::handler::resolve::{Names, Resolver, ResolverOptions};
use crate::probing::runner::ProbeRunner;
use crate::spec::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeSpec, ProbeType};
use crate::test_fakes::{NoExec, running_app};

/// glibc's largest size served from its per-thread cache (`tcache`), less its chunk header.
const CACHED: usize = 1032 - 8;

fn spec(handler: Handler) -> ProbeSpec {
    ProbeSpec {
        handler,
        initial_delay_seconds: 0,
        timeout: Duration::from_secs(1),
        period: Duration::from_secs(10),
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
    }
}

#[test]
fn the_future_the_worker_boxes_per_network_probe_fits_the_allocators_cache() {
    let prober = Prober::new(ProberOptions::default(), Arc::new(NoExec));
    let share = prober.pod_share("pod");
    let c = running_app("c");
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let http = spec(Handler::HttpGet(HttpGetSpec {
        scheme: HttpScheme::Http,
        host: None,
        path: "/healthz".into(),
        port: PortRef::Number(8080),
        headers: vec![],
    }));
    let tcp = spec(Handler::TcpSocket {
        host: None,
        port: PortRef::Number(8080),
    });
    for (name, spec) in [("HTTP", &http), ("TCP", &tcp)] {
        let probe = prober.run_for_pod(&share, ProbeType::Readiness, spec, ip, &c);
        let size = std::mem::size_of_val(&*probe);
        assert!(size <= CACHED, "the {name} probe's future is {size} bytes");
    }
}

#[test]
fn the_tcp_probes_own_box_fits_the_allocators_cache() {
    let c = running_app("c");
    let target = super::target(IpAddr::V4(Ipv4Addr::LOCALHOST), &c);
    let port = PortRef::Number(8080);
    let resolver = Resolver::new(ResolverOptions::default());
    let names = Names::new(&resolver, "pod");
    let probe = crate::handler::tcp::probe(
        None,
        &port,
        Duration::from_secs(1),
        &target,
        Guard::OPEN,
        names,
    );
    let size = std::mem::size_of_val(&probe);
    assert!(size <= CACHED, "a TCP probe's future is {size} bytes");
}
