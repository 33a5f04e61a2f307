//! The seam between workers and probe handlers: workers call a [`ProbeRunner`] and count the
//! [`Outcome`] it returns; the real runner is the handlers' `crate::probing::probe::Prober`, tests
//! script their own.

use std::net::IpAddr;

use futures::future::BoxFuture;

use crate::handler::pod_sockets::PodShare;
use crate::model::ContainerInfo;
use crate::model::outcome::Outcome;
use crate::spec::{ProbeSpec, ProbeType};

/// Runs one probe (with kubelet's retries on error) and returns its outcome.
pub trait ProbeRunner: Send + Sync + 'static {
    /// Probes `container` of a pod whose probe address is `host_ip`.
    fn run<'a>(
        &'a self,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome>;

    /// A hold on what the runner bounds per pod, for the pod `pod_uid`: a worker takes it once
    /// and keeps it for its life (the real runner bounds what one pod's probes hold at once; the
    /// default has no bound, and the worker then calls [`ProbeRunner::run`]).
    fn pod_share(&self, pod_uid: &str) -> Option<PodShare> {
        let _ = pod_uid;
        None
    }

    /// [`ProbeRunner::run`] for a container of the pod whose share is `pod`
    /// ([`ProbeRunner::pod_share`]); the default ignores the pod.
    fn run_for_pod<'a>(
        &'a self,
        pod: &'a PodShare,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        let _ = pod;
        self.run(ty, spec, host_ip, container)
    }

    /// How `container_id`'s exec probes run (direct or CRI, and why), once decided.
    fn exec_choice(&self, _container_id: &str) -> Option<crate::handler::exec::runner::ExecChoice> {
        None
    }
}
