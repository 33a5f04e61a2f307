//! The seam between workers and probe handlers: workers call a [`ProbeRunner`] and count the
//! [`ProbeVerdict`] it returns; the real runner is the handlers' `crate::probe::Prober`, tests
//! script their own.

use std::net::IpAddr;

use futures::future::BoxFuture;

use crate::model::ContainerInfo;
use crate::results::ProbeResult;
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

    /// [`ProbeRunner::run`] for a container of the pod `pod_uid`: the real runner bounds what one
    /// pod's probes hold at once; the default ignores the pod.
    fn run_for_pod<'a>(
        &'a self,
        pod_uid: &'a str,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, ProbeVerdict> {
        let _ = pod_uid;
        self.run(ty, spec, host_ip, container)
    }

    /// How `container_id`'s exec probes run (direct or CRI, and why), once decided.
    fn exec_choice(&self, _container_id: &str) -> Option<crate::handler::exec::runner::ExecChoice> {
        None
    }
}

/// What one probe produced, after kubelet's retries and mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// A result to count.
    Result {
        /// Success or Failure (a probe never yields Unknown).
        result: ProbeResult,
        /// Handler output (exec output, HTTP body or failure text), at most
        /// `handler::output::MAX_OUTPUT_BYTES`.
        output: String,
        /// A Success that kubelet reports as a `ProbeWarning` event (non-local HTTP redirect).
        warning: bool,
    },
    /// The handler errored on every attempt; the worker must discard this probe.
    Errored {
        /// The last attempt's error (kubelet: "probe errored and resulted in unknown state: ...").
        message: String,
    },
}
