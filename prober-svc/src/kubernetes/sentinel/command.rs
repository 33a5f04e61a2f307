//! `podward-prober sentinel`: the sentinel's flags and its process (client, admin endpoint,
//! metrics, leader election, marking) until the shutdown future resolves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use podward_api::daemon::admin::Admin;

use super::{
    DEFAULT_ELECTION_LEASE, ElectionTiming, Marker, Rates, SentinelMetrics, SentinelSettings,
};
use crate::clock::Clock;
use crate::kubernetes::client::{self, ClientError};
use crate::kubernetes::gate::KubeWriter;
use crate::kubernetes::limit::TokenBucket;
use crate::kubernetes::names::DEFAULT_GATE_CONDITION;
use crate::metrics::MetricsError;

/// The sentinel's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SentinelArgs {
    /// kubeconfig file. [default: the pod's service account (in-cluster configuration)]
    #[arg(long, env = "PODWARD_SENTINEL_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the node leases and the leader lease. [default: POD_NAMESPACE, else podward]
    #[arg(long, env = "PODWARD_SENTINEL_NAMESPACE")]
    pub namespace: Option<String>,
    /// This replica's identity in the leader election; unique per replica.
    /// [default: POD_NAME (else HOSTNAME) and a random suffix]
    #[arg(long, env = "PODWARD_SENTINEL_IDENTITY")]
    pub identity: Option<String>,
    /// Name of the leader lease.
    #[arg(long, env = "PODWARD_SENTINEL_ELECTION_LEASE", default_value = DEFAULT_ELECTION_LEASE)]
    pub election_lease: String,
    /// Leader lease duration, seconds (client-go's default).
    #[arg(
        long,
        env = "PODWARD_SENTINEL_LEADER_ELECT_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    pub leader_elect_lease_duration_seconds: u64,
    /// A leader that has not renewed for this long steps down, seconds.
    #[arg(
        long,
        env = "PODWARD_SENTINEL_LEADER_ELECT_RENEW_DEADLINE_SECONDS",
        default_value_t = 10
    )]
    pub leader_elect_renew_deadline_seconds: u64,
    /// Between tries to acquire or renew the leader lease, seconds.
    #[arg(
        long,
        env = "PODWARD_SENTINEL_LEADER_ELECT_RETRY_PERIOD_SECONDS",
        default_value_t = 2.0
    )]
    pub leader_elect_retry_period_seconds: f64,
    /// Between looks at the node leases, seconds (the node lifecycle controller's
    /// nodeMonitorPeriod).
    #[arg(long, env = "PODWARD_SENTINEL_PERIOD_SECONDS", default_value_t = 5.0)]
    pub period_seconds: f64,
    /// Accepted so that existing manifests run; not used: marking is not rate-limited (the node
    /// lifecycle controller marks a not-ready node's pods at once; only its evictions use
    /// --node-eviction-rate). The API QPS paces marking.
    #[arg(
        long,
        env = "PODWARD_SENTINEL_NODE_EVICTION_RATE",
        default_value_t = 0.1
    )]
    pub node_eviction_rate: f64,
    /// Accepted so that existing manifests run; not used: a partially disrupted zone is held
    /// (--secondary-node-eviction-rate is the controller's eviction rate there).
    #[arg(
        long,
        env = "PODWARD_SENTINEL_SECONDARY_NODE_EVICTION_RATE",
        default_value_t = 0.01
    )]
    pub secondary_node_eviction_rate: f64,
    /// Share of a zone's nodes expired at which the zone is partially disrupted
    /// (--unhealthy-zone-threshold).
    #[arg(
        long,
        env = "PODWARD_SENTINEL_UNHEALTHY_ZONE_THRESHOLD",
        default_value_t = 0.55
    )]
    pub unhealthy_zone_threshold: f64,
    /// Accepted so that existing manifests run; not used: every partially disrupted zone is
    /// held, whatever its size (--large-cluster-size-threshold).
    #[arg(
        long,
        env = "PODWARD_SENTINEL_LARGE_CLUSTER_SIZE_THRESHOLD",
        default_value_t = 50
    )]
    pub large_cluster_size_threshold: usize,
    /// The readiness-gate condition type.
    #[arg(long, env = "PODWARD_SENTINEL_READINESS_GATE_CONDITION", default_value = DEFAULT_GATE_CONDITION)]
    pub readiness_gate_condition: String,
    /// Requests per second to the API server.
    #[arg(long, env = "PODWARD_SENTINEL_KUBE_API_QPS", default_value_t = 20.0)]
    pub kube_api_qps: f64,
    /// Burst above --kube-api-qps.
    #[arg(long, env = "PODWARD_SENTINEL_KUBE_API_BURST", default_value_t = 40)]
    pub kube_api_burst: u32,
    /// Address of the admin endpoint (/metrics, /healthz, /readyz); port 0 picks one.
    #[arg(
        long,
        env = "PODWARD_SENTINEL_ADMIN_ADDR",
        default_value = "127.0.0.1:9644"
    )]
    pub admin_addr: SocketAddr,
}

/// Why the sentinel could not run.
#[derive(Debug, thiserror::Error)]
pub enum SentinelError {
    /// A flag cannot work.
    #[error("invalid setting {setting}: {message}")]
    Invalid {
        /// The flag.
        setting: &'static str,
        /// Why.
        message: String,
    },
    /// No API client.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Metrics could not be registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// This replica lost the leader lease (it stopped marking; a restart campaigns afresh).
    #[error(transparent)]
    Lost(#[from] super::election::Lost),
}

impl SentinelArgs {
    /// The settings these flags ask for.
    // One function on purpose: one check per flag, in the flags' order.
    pub fn settings(&self) -> Result<SentinelSettings, SentinelError> {
        let secs = |setting: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(SentinelError::Invalid {
                    setting,
                    message: format!("{v} is not a positive number of seconds"),
                })
            }
        };
        let rate = |setting: &'static str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(SentinelError::Invalid {
                    setting,
                    message: format!("{v} is not a rate"),
                })
            }
        };
        let election = ElectionTiming {
            lease_duration: Duration::from_secs(self.leader_elect_lease_duration_seconds),
            renew_deadline: Duration::from_secs(self.leader_elect_renew_deadline_seconds),
            retry_period: secs(
                "--leader-elect-retry-period-seconds",
                self.leader_elect_retry_period_seconds,
            )?,
        };
        if election.renew_deadline >= election.lease_duration
            || election.retry_period >= election.renew_deadline
        {
            return Err(SentinelError::Invalid {
                setting: "--leader-elect-renew-deadline-seconds",
                message: "needs retry period < renew deadline < lease duration".to_owned(),
            });
        }
        let threshold = self.unhealthy_zone_threshold;
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Err(SentinelError::Invalid {
                setting: "--unhealthy-zone-threshold",
                message: format!("{threshold} is not in (0, 1]"),
            });
        }
        // Explicit, or the pod's (or host's) name with a random suffix, as client-go's callers
        // make theirs: two candidates under one name would both believe they hold the lease.
        let identity = match self.identity.as_deref().map(str::trim) {
            Some(i) if !i.is_empty() => i.to_owned(),
            Some(_) => {
                return Err(SentinelError::Invalid {
                    setting: "--identity",
                    message: "empty".to_owned(),
                });
            }
            None => {
                let base = std::env::var("POD_NAME")
                    .or_else(|_| std::env::var("HOSTNAME"))
                    .ok()
                    .filter(|b| !b.trim().is_empty())
                    .unwrap_or_else(|| "podward-sentinel".to_owned());
                format!("{base}_{:016x}", rand::random::<u64>())
            }
        };
        Ok(SentinelSettings {
            namespace: crate::kubernetes::lease::lease_namespace(self.namespace.as_deref()),
            identity,
            election_lease: self.election_lease.clone(),
            election,
            period: secs("--period-seconds", self.period_seconds)?,
            rates: Rates {
                normal: rate("--node-eviction-rate", self.node_eviction_rate)?,
                secondary: rate(
                    "--secondary-node-eviction-rate",
                    self.secondary_node_eviction_rate,
                )?,
                unhealthy_zone_threshold: threshold,
                large_cluster_threshold: self.large_cluster_size_threshold,
            },
            gate_condition: self.readiness_gate_condition.trim().to_owned(),
        })
    }
}

/// Runs the sentinel for `args` until `shutdown` resolves.
pub async fn run(
    args: SentinelArgs,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), SentinelError> {
    let settings = args.settings()?;
    let config = client::load_config(args.kubeconfig.as_deref()).await?;
    let bucket = Arc::new(TokenBucket::new(args.kube_api_qps, args.kube_api_burst));
    // The lease watch may be quiet for minutes (no read timeout); the marker's writes have the
    // gate writer's deadlines, so a half-open connection never holds a node's marking.
    let client = client::build(config.clone(), bucket.clone(), client::Deadlines::watches())?;
    let writes = client::build(config.clone(), bucket, client::Deadlines::writes())?;
    // The leader lease on a client of its own (its own bucket: a renewal never queues behind
    // the marker's writes), every request bounded by the renew deadline, as client-go's.
    let deadline = settings.election.renew_deadline;
    let election = client::build(
        config,
        Arc::new(TokenBucket::new(5.0, 10)),
        client::Deadlines::within(deadline, deadline),
    )?;
    let admin = Admin::new();
    podward_api::daemon::build_info::register(
        &admin.registry,
        "sentinel",
        env!("CARGO_PKG_VERSION"),
    );
    let metrics = SentinelMetrics::new(Some(&admin.registry))?;
    admin.readiness.set(true);
    let stop = podward_api::daemon::stop::Stop::new();
    // A port clash must not take the safety net down with it: the sentinel marks without its
    // admin endpoint (in a pod, kubelet's probes of that endpoint restart it).
    let admin_task = match podward_api::daemon::admin::bind(args.admin_addr).await {
        Ok(listener) => Some(tokio::spawn(admin.serve(listener, stop.stopped()))),
        Err(e) => {
            tracing::error!(error = %e, addr = %args.admin_addr,
                "no admin endpoint (/metrics, /healthz, /readyz); the sentinel runs without it");
            None
        }
    };
    let clock = Clock::system();
    let events = super::SentinelEvents::spawn(writes.clone(), &settings.identity, clock);
    let marker = Marker::new(
        writes.clone(),
        Arc::new(KubeWriter::new(writes)),
        events,
        &settings.gate_condition,
        clock,
    );
    let result = super::run(client, election, marker, settings, metrics, clock, shutdown).await;
    stop.trigger();
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    Ok(result?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: SentinelArgs,
    }

    fn parse(argv: &[&str]) -> SentinelArgs {
        Wrap::try_parse_from(std::iter::once("sentinel").chain(argv.iter().copied()))
            .expect("parse")
            .args
    }

    #[test]
    fn two_replicas_without_an_identity_never_share_one() {
        let a = parse(&[]).settings().expect("settings");
        let b = parse(&[]).settings().expect("settings");
        assert_ne!(a.identity, b.identity);
        let c = parse(&["--identity", "sentinel-0"])
            .settings()
            .expect("settings");
        assert_eq!(c.identity, "sentinel-0");
        assert_eq!(c.rates, Rates::default());
        assert_eq!(c.election, ElectionTiming::default());
        assert_eq!(c.period, Duration::from_secs(5));
    }

    #[test]
    fn election_timing_must_nest() {
        let e = parse(&["--leader-elect-renew-deadline-seconds", "20"])
            .settings()
            .expect_err("deadline past the lease");
        assert!(e.to_string().contains("renew deadline"), "{e}");
        let e = parse(&["--unhealthy-zone-threshold", "0"])
            .settings()
            .expect_err("threshold");
        assert!(e.to_string().contains("--unhealthy-zone-threshold"), "{e}");
    }
}
