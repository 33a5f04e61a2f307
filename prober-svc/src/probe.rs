//! The one entry point workers call, as kubelet's `prober.go`: pick the handler, retry it while it
//! *errors* (up to three back-to-back attempts), and map its result to what the worker counts.
//!
//! Result mapping (kubelet `prober.probe`): Success → Success; Warning (an HTTP redirect to another
//! host) → Success with `warning`; Failure → Failure; Unknown without error → Failure; an error on
//! all three attempts → [`ProbeVerdict::Errored`], which the worker discards without touching its
//! counters.

pub mod expand;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::http_probe::HttpProber;
use crate::port::ContainerPort;
use crate::spec::{Handler, ProbeSpec, ProbeType};

pub use crate::exec_probe::CriExec;

/// kubelet's `maxProbeRetries`.
pub const MAX_PROBE_RETRIES: usize = 3;

/// Largest probe output kept (kubelet's 10 KiB read limit for exec output and HTTP bodies).
pub const MAX_OUTPUT_BYTES: usize = 10 * 1024;

/// The result a worker counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Counts towards the success threshold.
    Success,
    /// Counts towards the failure threshold.
    Failure,
}

/// What one probe produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// A result to count.
    Result {
        /// Success or Failure after kubelet's mapping.
        result: ProbeResult,
        /// Handler output (exec output, HTTP body or error text), at most [`MAX_OUTPUT_BYTES`].
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

/// Where a probe runs.
#[derive(Debug, Clone, Copy)]
pub struct ProbeTarget<'a> {
    /// The pod IP (or the node IP for a host-network pod), used when the probe gives no host.
    pub host_ip: IpAddr,
    /// The CRI container ID, for exec.
    pub container_id: &'a str,
    /// The container's declared ports, for named ports.
    pub ports: &'a [ContainerPort],
    /// The container's static environment, for `$(VAR)` expansion of exec commands.
    pub env: &'a [(String, String)],
}

/// Runs a command in a container; the seam between the exec probe and CRI.
pub trait ExecRunner: Send + Sync + 'static {
    /// Runs `cmd` in `container_id`, giving up after `timeout`.
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>>;
}

/// A finished command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit code (0 = success).
    pub exit_code: i32,
}

/// Why a command did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// It ran out of time; the text becomes the failure output ("command ... timed out").
    #[error("{0}")]
    Timeout(String),
    /// Anything else (container gone, runtime down...): the probe errors and is retried.
    #[error("{0}")]
    Other(String),
}

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

/// What a handler attempt produced before kubelet's mapping; `Err` is the retried error path.
pub(crate) type Attempt = Result<Outcome, String>;

/// A handler's own result (kubelet's `probe.Result` minus Unknown, which maps to Failure or Err).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success(String),
    Warning(String),
    Failure(String),
}

/// Runs probes; shared by all workers (cheap to call concurrently).
pub struct Prober {
    exec: Arc<dyn ExecRunner>,
    http: HttpProber,
    user_agent: String,
}

impl Prober {
    /// Builds the handlers once (TLS config, User-Agent) so probes do not rebuild them.
    pub fn new(opts: ProberOptions, exec: Arc<dyn ExecRunner>) -> Self {
        let user_agent = format!("kube-probe/{}", opts.kube_version);
        Self {
            exec,
            http: HttpProber::new(&user_agent),
            user_agent,
        }
    }

    /// Runs one probe of `spec` against `target` (kubelet `prober.probe` with retries).
    pub async fn probe(
        &self,
        ty: ProbeType,
        spec: &ProbeSpec,
        target: &ProbeTarget<'_>,
    ) -> ProbeVerdict {
        let mut message = String::new();
        for attempt in 1..=MAX_PROBE_RETRIES {
            match self.run_once(spec, target).await {
                Ok(outcome) => return verdict(outcome),
                Err(e) => {
                    tracing::debug!(probe = %ty, attempt, error = %e, "probe errored");
                    message = e;
                }
            }
        }
        ProbeVerdict::Errored {
            message: cap_output(message),
        }
    }

    async fn run_once(&self, spec: &ProbeSpec, target: &ProbeTarget<'_>) -> Attempt {
        match &spec.handler {
            // Exec and gRPC are boxed: their states (a CRI call, a tonic channel) are far larger
            // than an HTTP or TCP probe's, and the worker boxes every probe's future, so inline they
            // would make every HTTP/TCP probe allocate and copy their size too.
            Handler::Exec { command } => {
                Box::pin(crate::exec_probe::probe(
                    &*self.exec,
                    command,
                    spec.timeout,
                    target,
                ))
                .await
            }
            Handler::HttpGet(get) => self.http.probe(get, spec.timeout, target).await,
            Handler::TcpSocket { host, port } => {
                crate::tcp_probe::probe(host.as_deref(), port, spec.timeout, target).await
            }
            Handler::Grpc { port, service } => {
                Box::pin(crate::grpc_probe::probe(
                    target.host_ip,
                    *port,
                    service.as_deref().unwrap_or(""),
                    spec.timeout,
                    &self.user_agent,
                ))
                .await
            }
        }
    }
}

fn verdict(outcome: Outcome) -> ProbeVerdict {
    let (result, output, warning) = match outcome {
        Outcome::Success(o) => (ProbeResult::Success, o, false),
        Outcome::Warning(o) => (ProbeResult::Success, o, true),
        Outcome::Failure(o) => (ProbeResult::Failure, o, false),
    };
    ProbeVerdict::Result {
        result,
        output: cap_output(output),
        warning,
    }
}

/// Cuts `s` to at most [`MAX_OUTPUT_BYTES`], on a character boundary.
pub(crate) fn cap_output(mut s: String) -> String {
    if s.len() > MAX_OUTPUT_BYTES {
        let mut end = MAX_OUTPUT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Go's `time.Duration.String()` for whole seconds ("1s", "1m30s", "1h0m0s"), as kubelet's
/// messages print timeouts.
pub(crate) fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let frac = d.subsec_millis();
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, _) => format!("{m}m{secs}"),
        _ => format!("{h}h{m}m{secs}"),
    }
}
