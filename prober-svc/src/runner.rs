//! The seam between workers and probe handlers: workers call a [`ProbeRunner`]; the real one is
//! the handlers' [`Prober`], tests script their own.

use std::net::IpAddr;

use futures::future::BoxFuture;

use crate::model::ContainerInfo;
use crate::probe::{ProbeTarget, ProbeVerdict, Prober};
use crate::spec::{ProbeSpec, ProbeType};

/// Runs one probe (with kubelet's retries on error) and returns its verdict.
pub trait ProbeRunner: Send + Sync + 'static {
    /// Probes `container` of a pod whose probe address is `host_ip`.
    fn run<'a>(
        &'a self,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, ProbeVerdict>;
}

impl ProbeRunner for Prober {
    fn run<'a>(
        &'a self,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, ProbeVerdict> {
        Box::pin(async move {
            let target = ProbeTarget {
                host_ip,
                container_id: &container.id,
                ports: &container.ports,
                env: &container.env,
            };
            self.probe(ty, spec, &target).await
        })
    }
}
