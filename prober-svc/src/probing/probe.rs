//! The one entry point workers call, as kubelet's `prober.go`: pick the handler and retry it while
//! it *errors* (up to three back-to-back attempts). The handler's [`Answer`] becomes the probe's
//! [`Outcome`] (Success, Warning or Failure, with its output); an error on all three attempts is
//! [`Outcome::Errored`], which the worker discards without touching its counters (kubelet
//! `prober.probe`: a Warning, an HTTP redirect to another host, counts as a Success and is
//! recorded as an event).

use std::sync::Arc;

use futures::future::BoxFuture;
use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

use crate::handler::attempt::{Answer, ProbeTarget};
use crate::handler::exec::runner::{ExecError, ExecRunner};
use crate::handler::host_policy::NodePolicy;
use crate::handler::http::{HttpError, HttpProber};
use crate::handler::pod_sockets::{self, PodShare, PodSockets};
use crate::handler::resolve::{Names, Resolver, ResolverOptions};
use crate::handler::target_budget::{Meter, TargetBudget};
use crate::handler::tcp::TcpError;
use crate::handler::{exec, grpc, tcp};
use crate::model::ContainerInfo;
use crate::model::outcome::Outcome;
use crate::probing::runner::ProbeRunner;
use crate::spec::{Handler, ProbeSpec, ProbeType};

/// kubelet's `maxProbeRetries`.
pub const MAX_PROBE_RETRIES: usize = 3;

/// Settings of the prober's handlers.
#[derive(Debug, Clone)]
pub struct ProberOptions {
    /// Kubernetes "major.minor" for the User-Agent, e.g. "1.33" gives `kube-probe/1.33`.
    pub kube_version: String,
}

impl Default for ProberOptions {
    fn default() -> Self {
        Self {
            kube_version: "1.33".to_owned(),
        }
    }
}

/// Why one handler attempt errored (kubelet: Unknown with an error); retried, then discarded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// The exec runner failed (not a timeout, which is a Failure).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The HTTP probe's port did not resolve or its body could not be read.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The TCP probe's port did not resolve, or its host is denied.
    #[error(transparent)]
    Tcp(#[from] TcpError),
}

/// Runs probes; shared by all workers (cheap to call concurrently).
pub struct Prober {
    exec: Arc<dyn ExecRunner>,
    http: HttpProber,
    user_agent: String,
    host_policy: NodePolicy,
    pod_sockets: Arc<PodSockets>,
    target_budget: Arc<TargetBudget>,
    resolver: Arc<Resolver>,
}

impl Prober {
    /// Builds the handlers once (TLS config, User-Agent) so probes do not rebuild them.
    pub fn new(opts: ProberOptions, exec: Arc<dyn ExecRunner>) -> Self {
        let user_agent = format!("kube-probe/{}", opts.kube_version);
        Self {
            exec,
            http: HttpProber::new(&user_agent),
            user_agent,
            host_policy: NodePolicy::ALLOW,
            pod_sockets: PodSockets::new(pod_sockets::PER_POD, None),
            target_budget: TargetBudget::unbounded(),
            resolver: Arc::new(Resolver::new(ResolverOptions::default())),
        }
    }

    /// Resolves the host names of probes through `resolver` (one with the default bounds, over
    /// the node's `/etc/hosts`, unless set).
    pub fn with_resolver(mut self, resolver: Arc<Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Charges what the targets of every pod's network probes send to `budget` (unbounded
    /// unless set).
    pub fn with_target_budget(mut self, budget: Arc<TargetBudget>) -> Self {
        self.target_budget = budget;
        self
    }

    /// Bounds each pod to `per_pod` network probes in flight, reporting the sockets held on
    /// `held` (`podward_prober_sockets_held`).
    pub fn with_pod_sockets(mut self, per_pod: usize, held: IntGauge) -> Self {
        self.pod_sockets = PodSockets::new(per_pod, Some(held));
        self
    }

    /// Counts on `fallbacks` the HTTPS handshakes redone with OpenSSL because the server sent a
    /// handshake message over rustls' cap (`podward_prober_tls_fallback_total`).
    pub fn with_tls_fallbacks(mut self, fallbacks: IntCounter) -> Self {
        self.http.count_tls_fallbacks(fallbacks);
        self
    }

    /// Sets `--probe-host-policy` on this node.
    pub fn with_host_policy(mut self, policy: NodePolicy) -> Self {
        self.host_policy = policy;
        self
    }

    /// Runs one probe of `spec` against `target` (kubelet `prober.probe` with retries).
    pub async fn probe(
        &self,
        ty: ProbeType,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> Outcome {
        self.probe_for(None, ty, spec, target).await
    }

    /// [`Prober::probe`] for a container of the pod `pod_uid`, within the pod's bound on
    /// network probes in flight.
    pub async fn probe_for_pod(
        &self,
        pod_uid: &str,
        ty: ProbeType,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> Outcome {
        let share = self.pod_sockets.pod(pod_uid);
        self.probe_for(Some(&share), ty, spec, target).await
    }

    /// The hold on `pod_uid`'s bound a worker keeps for its life, so its probes take their place
    /// without looking the pod up.
    pub fn pod_share(&self, pod_uid: &str) -> PodShare {
        self.pod_sockets.pod(pod_uid)
    }

    /// [`Prober::probe_for_pod`] within the bound `pod` holds ([`Prober::pod_share`]).
    pub async fn probe_in(
        &self,
        pod: &PodShare,
        ty: ProbeType,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> Outcome {
        self.probe_for(Some(pod), ty, spec, target).await
    }

    async fn probe_for(
        &self,
        pod: Option<&PodShare>,
        ty: ProbeType,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> Outcome {
        let mut message = String::new();
        for attempt in 1..=MAX_PROBE_RETRIES {
            match self.attempt(pod, spec, target).await {
                Ok(answer) => return outcome(answer),
                Err(e) => {
                    tracing::debug!(probe = %ty, attempt, error = %e, "probe errored");
                    message = e.to_string();
                }
            }
        }
        Outcome::Errored(message)
    }

    async fn attempt(
        &self,
        pod: Option<&PodShare>,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> Result<Answer, AttemptError> {
        let guard = self.host_policy.guard(target.host_ip);
        // A network probe takes its place in its pod's count for as long as it holds a socket;
        // a pod at its bound waits for its own probes (up to this probe's timeout), no other.
        let _in_flight = match (&spec.handler, pod) {
            (Handler::Exec { .. }, _) | (_, None) => None,
            (_, Some(pod)) => {
                let deadline = Instant::now() + spec.timeout;
                match pod.acquire(deadline).await {
                    Ok(held) => Some(held),
                    Err(e) => return Ok(Answer::Failure(e.to_string())),
                }
            }
        };
        // The worker allocates every probe's future, so it is kept small: below glibc's
        // per-thread cache limit (1,032 bytes) an allocation is a few instructions, above it each
        // one takes the allocator's slow path and merges the heap's free small chunks first. So
        // every handler's state larger than an HTTP probe's outer steps is boxed on its own (a
        // test holds the sizes): exec and gRPC (a CRI call, a tonic channel: several KiB), TCP
        // (its connect wait), and within the HTTP probe its exchange.
        // What a pod's targets send is charged to the node's budget (`target_budget`).
        let meter = pod.map(|p| Meter::new(&self.target_budget, p.uid()));
        // Host names resolve on the probes' own pool, in the pod's turn (a probe with no pod
        // shares the turn of the others without one).
        let names = Names::new(&self.resolver, pod.map_or("", PodShare::uid));
        Ok(match &spec.handler {
            Handler::Exec { command } => {
                Box::pin(exec::probe(&*self.exec, command, spec.timeout, target)).await?
            }
            Handler::HttpGet(get) => {
                self.http
                    .probe(get, spec.timeout, target, guard, meter.as_ref(), names)
                    .await?
            }
            Handler::TcpSocket { host, port } => {
                Box::pin(tcp::probe(
                    host.as_deref(),
                    port,
                    spec.timeout,
                    target,
                    guard,
                    names,
                ))
                .await?
            }
            Handler::Grpc { port, service } => {
                Box::pin(grpc::probe(
                    target.host_ip,
                    *port,
                    service.as_deref().unwrap_or(""),
                    spec.timeout,
                    &self.user_agent,
                    meter.as_ref(),
                ))
                .await
            }
        })
    }
}

impl ProbeRunner for Prober {
    fn run<'a>(
        &'a self,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: std::net::IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { self.probe(ty, spec, &target(host_ip, container)).await })
    }

    fn pod_share(&self, pod_uid: &str) -> Option<PodShare> {
        Some(Prober::pod_share(self, pod_uid))
    }

    fn run_for_pod<'a>(
        &'a self,
        pod: &'a PodShare,
        ty: ProbeType,
        spec: &'a ProbeSpec,
        host_ip: std::net::IpAddr,
        container: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            self.probe_in(pod, ty, spec, &target(host_ip, container))
                .await
        })
    }

    fn exec_choice(&self, container_id: &str) -> Option<crate::handler::exec::runner::ExecChoice> {
        self.exec.choice(container_id)
    }
}

/// The probe's outcome when an attempt answered: the answer, with its output.
fn outcome(answer: Answer) -> Outcome {
    match answer {
        Answer::Success(o) => Outcome::Success(o),
        Answer::Warning(o) => Outcome::Warning(o),
        Answer::Failure(o) => Outcome::Failure(o),
    }
}

/// What a probe of `container` at `host_ip` aims at.
fn target(host_ip: std::net::IpAddr, container: &ContainerInfo) -> ProbeTarget<'_> {
    ProbeTarget {
        host_ip,
        container_id: &container.id,
        ports: &container.ports,
        env: &container.env,
    }
}

#[cfg(test)]
mod tests;
