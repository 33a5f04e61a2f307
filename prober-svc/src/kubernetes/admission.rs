//! `podward-prober admission`: the mutating admission webhook that hands a pod's probes to
//! podward at creation ("takeover"). For each pod the API server sends (the webhook
//! configuration selects opted-in namespaces and pods), [`takeover`] moves the probes of its
//! containers into the `podward.io/probes` annotation, adds the readiness gate and the podward
//! node label to its `nodeSelector`, and records what moved in `podward.io/probes-moved`.
//! [`review`] reads and answers the AdmissionReview, [`server`] serves it over HTTPS with the
//! certificate [`tls`] reloads when its files change, [`metrics`] counts.
//!
//! The webhook never refuses a pod: its configuration's `failurePolicy: Ignore` admits a pod
//! unchanged whenever it cannot answer, and kubelet then probes that pod itself.

pub mod metrics;
pub mod review;
pub mod server;
pub mod takeover;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use podward_api::daemon::admin::Admin;

use crate::kubernetes::names::DEFAULT_GATE_CONDITION;
use crate::metrics::MetricsError;

/// The node label (and value) that marks nodes running podward, by default.
pub const DEFAULT_NODE_SELECTOR: &str = "podward.io/node=true";

/// The webhook's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Address of the HTTPS endpoint the API server calls (`POST /mutate`).
    #[arg(
        long,
        env = "PODWARD_ADMISSION_LISTEN_ADDR",
        default_value = "0.0.0.0:8443"
    )]
    pub listen_addr: SocketAddr,
    /// PEM certificate chain served (re-read when it changes).
    #[arg(
        long,
        env = "PODWARD_ADMISSION_TLS_CERT_FILE",
        default_value = "/etc/podward/admission-tls/tls.crt"
    )]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the certificate (re-read when it changes).
    #[arg(
        long,
        env = "PODWARD_ADMISSION_TLS_KEY_FILE",
        default_value = "/etc/podward/admission-tls/tls.key"
    )]
    pub tls_key_file: PathBuf,
    /// Between looks at the certificate files, seconds.
    #[arg(
        long,
        env = "PODWARD_ADMISSION_TLS_RELOAD_SECONDS",
        default_value_t = 10.0
    )]
    pub tls_reload_seconds: f64,
    /// The readiness-gate condition added to pods whose readiness or startup probes move.
    #[arg(long, env = "PODWARD_ADMISSION_READINESS_GATE_CONDITION", default_value = DEFAULT_GATE_CONDITION)]
    pub readiness_gate_condition: String,
    /// KEY=VALUE: the node label that only nodes running podward carry; added to every
    /// taken-over pod's nodeSelector so that it is scheduled only there. An empty value adds
    /// nothing (every node of the cluster runs podward).
    #[arg(long, env = "PODWARD_ADMISSION_NODE_SELECTOR", default_value = DEFAULT_NODE_SELECTOR)]
    pub node_selector: String,
    /// Address of the admin endpoint (/metrics, /healthz, /readyz); port 0 picks one.
    #[arg(
        long,
        env = "PODWARD_ADMISSION_ADMIN_ADDR",
        default_value = "127.0.0.1:9645"
    )]
    pub admin_addr: SocketAddr,
}

/// Why the webhook could not run.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// A flag cannot work.
    #[error("invalid setting {setting}: {message}")]
    Invalid {
        /// The flag.
        setting: &'static str,
        /// Why.
        message: String,
    },
    /// The serving certificate cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Metrics could not be registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl AdmissionArgs {
    /// The takeover policy these flags ask for.
    pub fn policy(&self) -> Result<takeover::Policy, AdmissionError> {
        let gate = self.readiness_gate_condition.trim();
        if gate.is_empty() {
            return Err(AdmissionError::Invalid {
                setting: "--readiness-gate-condition",
                message: "empty".to_owned(),
            });
        }
        Ok(takeover::Policy {
            gate_condition: gate.to_owned(),
            node_selector: parse_node_selector(&self.node_selector)?,
        })
    }
}

/// `KEY=VALUE` as a nodeSelector entry; empty: none.
pub fn parse_node_selector(s: &str) -> Result<Option<(String, String)>, AdmissionError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => {
            Ok(Some((k.trim().to_owned(), v.trim().to_owned())))
        }
        _ => Err(AdmissionError::Invalid {
            setting: "--node-selector",
            message: format!("{s:?} is not KEY=VALUE (e.g. podward.io/node=true), nor empty"),
        }),
    }
}

/// Runs the webhook for `args` until `shutdown` resolves.
pub async fn run(
    args: AdmissionArgs,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), AdmissionError> {
    let policy = args.policy()?;
    if !(args.tls_reload_seconds.is_finite() && args.tls_reload_seconds > 0.0) {
        return Err(AdmissionError::Invalid {
            setting: "--tls-reload-seconds",
            message: format!(
                "{} is not a positive number of seconds",
                args.tls_reload_seconds
            ),
        });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let files = tls::CertFiles {
        cert: args.tls_cert_file.clone(),
        key: args.tls_key_file.clone(),
    };
    let reloader = Arc::new(tls::CertReloader::load(files, provider.clone())?);
    let config = tls::server_config(reloader.clone(), provider)?;
    let admin = Admin::new();
    podward_api::daemon::build_info::register(
        &admin.registry,
        "admission",
        env!("CARGO_PKG_VERSION"),
    );
    let metrics = metrics::AdmissionMetrics::new(Some(&admin.registry))?;
    let listener = tokio::net::TcpListener::bind(args.listen_addr)
        .await
        .map_err(|source| AdmissionError::Bind {
            addr: args.listen_addr,
            source,
        })?;
    admin.readiness.set(true);
    let stop = podward_api::daemon::stop::Stop::new();
    let admin_task = match podward_api::daemon::admin::bind(args.admin_addr).await {
        Ok(l) => Some(tokio::spawn(admin.serve(l, stop.stopped()))),
        Err(e) => {
            tracing::error!(error = %e, "no admin endpoint (/metrics, /healthz, /readyz); the webhook runs without it");
            None
        }
    };
    let watcher = tokio::spawn(reloader.watch(
        Duration::from_secs_f64(args.tls_reload_seconds),
        metrics.clone(),
    ));
    tracing::info!(addr = %args.listen_addr, node_selector = ?policy.node_selector,
        gate = %policy.gate_condition, "takeover webhook serving");
    let webhook = server::Webhook {
        policy: Arc::new(policy),
        metrics,
    };
    webhook
        .serve(
            listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            shutdown,
        )
        .await;
    watcher.abort();
    stop.trigger();
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    Ok(())
}
