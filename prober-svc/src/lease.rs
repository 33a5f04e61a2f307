//! The node lease: a `coordination.k8s.io/v1` Lease per node, in podward's namespace and named
//! after the node, that the prober renews while its readiness-gate conditions are current — the
//! statement kubelet's node lease makes for the node, made for podward's conditions. The
//! sentinel ([`crate::sentinel`]) reads an expired lease as "this node's conditions are frozen".
//!
//! - Renewed at kubelet's node-lease cadence (every 10 s, 40 s duration, both flags) by
//!   kubelet's algorithm: the lease is kept from the last answer and replaced (`PUT`) with a new
//!   `renewTime`; a `404` creates it; a `409` (someone else changed it: another writer, or our
//!   cached copy is stale) reads it again and retries at once, up to [`MAX_TRIES`] times.
//! - Only while healthy ([`Health`]): the pod source read (the shim's stream, or containerd
//!   polled), the node's pods listed from the API, the gate writer draining. A prober alive but
//!   blind stops renewing: the lease says "my conditions are current", not "my process exists".
//! - Its own client with its own token bucket, as kubelet's heartbeat client: a renewal never
//!   waits behind a queue of condition writes.
//! - It carries the node's zone (the Node's `topology.kubernetes.io/zone` label, read once per
//!   process), so the sentinel rate-limits per zone as the node lifecycle controller does
//!   without watching every Node. A Node that cannot be read (no RBAC, not found) leaves the
//!   lease without a zone.

mod health;
pub mod report;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use podward_api::backoff::Backoff;
use podward_api::daemon::stop::Stop;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tokio::task::JoinHandle;

pub use self::health::{Blind, Health, ProberHealth};
use crate::clock::Clock;
use crate::kubernetes::client;
use crate::kubernetes::limit::TokenBucket;
use crate::metrics::MetricsError;

/// Label on every node lease (the sentinel watches leases with it, and nothing else).
pub const NODE_LEASE_LABEL: &str = "podward.io/node-lease";

/// The zone label: the Node's, copied onto its lease; the sentinel groups the leases by it, as
/// the node lifecycle controller groups nodes.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The lease client's own rate: a renewal (up to [`MAX_TRIES`] reads and writes) every
/// interval needs far less; the bucket only bounds a bug.
const LEASE_QPS: f64 = 5.0;
const LEASE_BURST: u32 = 10;

/// Tries of one renewal (a `409` reads the lease again and retries; kubelet's
/// `maxUpdateRetries`).
pub const MAX_TRIES: usize = 5;

/// How the node lease is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSettings {
    /// The namespace of the leases (podward's own).
    pub namespace: String,
    /// The node: the lease's name and holder.
    pub node: String,
    /// Time between renewals.
    pub renew_interval: Duration,
    /// The lease's `leaseDurationSeconds`: how long a renewal vouches for the conditions.
    pub duration: Duration,
}

/// Why a renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// Every try met a conflict.
    #[error("the lease kept changing under us ({MAX_TRIES} conflicts in a row)")]
    Conflicts,
    /// The API answered with an error, or was not reached.
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// The renewer's metrics (`podward_prober_lease_*`).
#[derive(Clone)]
pub struct LeaseMetrics {
    /// Renewals by `result` (`ok`, `conflict`, `error`, `skipped`: not healthy).
    pub renewals: IntCounterVec,
    /// 1 while the prober is healthy enough to renew.
    pub healthy: IntGauge,
    /// Unix seconds of the last successful renewal.
    pub last_renewal: IntGauge,
}

impl LeaseMetrics {
    /// Creates the metrics, registered in `registry` when given.
    pub fn new(registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let m = Self {
            renewals: IntCounterVec::new(
                Opts::new(
                    "podward_prober_lease_renewals_total",
                    "Node lease renewals by result (ok, conflict, error, skipped: the prober is not current).",
                ),
                &["result"],
            )?,
            healthy: IntGauge::new(
                "podward_prober_lease_healthy",
                "1 while the prober's conditions are current (pod source read, pods listed, gate writer draining).",
            )?,
            last_renewal: IntGauge::new(
                "podward_prober_lease_last_renewal_timestamp_seconds",
                "Unix time of the node lease's last successful renewal.",
            )?,
        };
        if let Some(r) = registry {
            r.register(Box::new(m.renewals.clone()))?;
            r.register(Box::new(m.healthy.clone()))?;
            r.register(Box::new(m.last_renewal.clone()))?;
        }
        Ok(m)
    }
}

/// Keeps one node's lease.
pub struct Renewer {
    api: Api<Lease>,
    settings: LeaseSettings,
    clock: Clock,
    metrics: LeaseMetrics,
    /// The lease as the last answer had it (replaced without a read when it is current).
    cached: Option<Lease>,
    nodes: Api<Node>,
    /// The node's zone label, once the Node was read (`Some(None)`: it has none, or cannot be
    /// read).
    zone: Option<Option<String>>,
}

impl Renewer {
    /// A renewer writing through `client`.
    pub fn new(
        client: kube::Client,
        settings: LeaseSettings,
        clock: Clock,
        metrics: LeaseMetrics,
    ) -> Self {
        Self {
            api: Api::namespaced(client.clone(), &settings.namespace),
            nodes: Api::all(client),
            settings,
            clock,
            metrics,
            cached: None,
            zone: None,
        }
    }

    /// Renews every interval while `health` says the prober is current, until `shutdown`.
    /// Never returns an error: failures are counted, logged at their first occurrence, and
    /// retried at the next interval.
    pub async fn run(mut self, health: &dyn Health, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(self.settings.renew_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut was_blind: Option<Blind> = None;
        let mut ever_current = false;
        let mut failing = false;
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            match health.check() {
                Err(why) => {
                    self.metrics.healthy.set(0);
                    self.metrics.renewals.with_label_values(&["skipped"]).inc();
                    if was_blind.as_ref() != Some(&why) {
                        // A prober that is starting is not current yet: that is no news.
                        if ever_current {
                            tracing::warn!(node = %self.settings.node, reason = %why,
                                "not renewing the node lease: this prober's conditions are not current");
                        } else {
                            tracing::info!(node = %self.settings.node, reason = %why,
                                "the node lease waits for this prober's conditions to be current");
                        }
                        was_blind = Some(why);
                    }
                    continue;
                }
                Ok(()) => {
                    self.metrics.healthy.set(1);
                    ever_current = true;
                    if was_blind.take().is_some() {
                        tracing::info!(node = %self.settings.node, "current again; renewing the node lease");
                    }
                }
            }
            match self.renew().await {
                Ok(()) => {
                    self.metrics.renewals.with_label_values(&["ok"]).inc();
                    self.metrics
                        .last_renewal
                        .set(self.clock.now_ns() / 1_000_000_000);
                    if failing {
                        tracing::info!(node = %self.settings.node, "node lease renewed again");
                        failing = false;
                    }
                }
                Err(e) => {
                    let label = match e {
                        RenewError::Conflicts => "conflict",
                        RenewError::Api(_) => "error",
                    };
                    self.metrics.renewals.with_label_values(&[label]).inc();
                    if failing {
                        tracing::debug!(node = %self.settings.node, error = %e, "node lease renewal failed again");
                    } else {
                        tracing::warn!(node = %self.settings.node, error = %e,
                            "cannot renew the node lease; retrying at the next interval");
                        failing = true;
                    }
                }
            }
        }
    }

    /// One renewal: replace the cached lease with a new `renewTime` (create it when missing);
    /// on a conflict read it again and retry.
    pub async fn renew(&mut self) -> Result<(), RenewError> {
        if self.zone.is_none() {
            self.zone = self.read_zone().await;
        }
        for _ in 0..MAX_TRIES {
            let base = match self.cached.take() {
                Some(l) => l,
                None => match self.api.get_opt(&self.settings.node).await? {
                    Some(l) => l,
                    None => match self.api.create(&PostParams::default(), &self.fresh()).await {
                        Ok(l) => {
                            self.cached = Some(l);
                            return Ok(());
                        }
                        // Created by someone else between our read and our create: read again.
                        Err(kube::Error::Api(s)) if s.code == 409 => continue,
                        Err(e) => return Err(e.into()),
                    },
                },
            };
            let next = self.renewed(base);
            match self
                .api
                .replace(&self.settings.node, &PostParams::default(), &next)
                .await
            {
                Ok(l) => {
                    self.cached = Some(l);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::debug!(node = %self.settings.node, message = %s.message,
                        "node lease conflict; reading it again");
                }
                // Deleted under us: the next try creates it.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(RenewError::Conflicts)
    }

    /// The node's zone label; `None` to ask again at the next renewal (the API did not
    /// answer), `Some(None)` when the Node has no zone or cannot be read.
    async fn read_zone(&self) -> Option<Option<String>> {
        match self.nodes.get_opt(&self.settings.node).await {
            Ok(node) => {
                let zone = node
                    .and_then(|n| n.metadata.labels)
                    .and_then(|mut l| l.remove(ZONE_LABEL))
                    .filter(|z| !z.is_empty());
                tracing::info!(node = %self.settings.node, zone = zone.as_deref().unwrap_or(""),
                    "the node lease carries the node's zone");
                Some(zone)
            }
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
                tracing::info!(node = %self.settings.node, code = s.code,
                    "cannot read this node's zone; the node lease has none");
                Some(None)
            }
            Err(e) => {
                tracing::debug!(node = %self.settings.node, error = %e, "reading the node's zone failed");
                None
            }
        }
    }

    /// This lease's labels: the node-lease label, and the zone when known.
    fn label(&self, labels: &mut std::collections::BTreeMap<String, String>) {
        labels.insert(NODE_LEASE_LABEL.to_owned(), "true".to_owned());
        if let Some(Some(zone)) = &self.zone {
            labels.insert(ZONE_LABEL.to_owned(), zone.clone());
        }
    }

    /// A new lease for this node.
    fn fresh(&self) -> Lease {
        let mut labels: std::collections::BTreeMap<String, String> = [(
            "app.kubernetes.io/managed-by".to_owned(),
            "podward-prober".to_owned(),
        )]
        .into();
        self.label(&mut labels);
        Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.node.clone()),
                namespace: Some(self.settings.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(self.spec(None)),
        }
    }

    /// `base` with this node as holder and a new renewal.
    fn renewed(&self, mut base: Lease) -> Lease {
        let transitions = base.spec.as_ref().and_then(|s| s.lease_transitions);
        base.spec = Some(self.spec(transitions));
        self.label(base.metadata.labels.get_or_insert_with(Default::default));
        base
    }

    fn spec(&self, lease_transitions: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.node.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            renew_time: Some(micro_time(self.clock.now_ns())),
            lease_transitions,
            ..LeaseSpec::default()
        }
    }
}

/// Connects (retrying with backoff until the configuration loads, a client of its own with a
/// token bucket of its own) and renews the node lease until `stop` is triggered.
pub fn spawn(
    settings: LeaseSettings,
    kubeconfig: Option<PathBuf>,
    health: Arc<dyn Health>,
    clock: Clock,
    metrics: LeaseMetrics,
    stop: Stop,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60), 0.2);
        let client = loop {
            let made = async {
                let config = client::load_config(kubeconfig.as_deref()).await?;
                // kubelet's heartbeat client times out after one renew interval: a renewal
                // stuck on a dead connection must not outlive the next one.
                let deadline = Some(settings.renew_interval);
                let deadlines = client::Deadlines {
                    request: deadline,
                    read: deadline,
                };
                client::build(
                    config,
                    Arc::new(TokenBucket::new(LEASE_QPS, LEASE_BURST)),
                    deadlines,
                )
            };
            tokio::select! {
                () = stop.stopped() => return,
                made = made => match made {
                    Ok(c) => break c,
                    Err(e) => tracing::debug!(error = %e, "no Kubernetes API client for the node lease yet"),
                },
            }
            tokio::select! {
                () = stop.stopped() => return,
                () = tokio::time::sleep(backoff.next_delay()) => {}
            }
        };
        tracing::info!(node = %settings.node, namespace = %settings.namespace,
            every_s = settings.renew_interval.as_secs(), duration_s = settings.duration.as_secs(),
            "renewing the node lease while this prober's conditions are current");
        Renewer::new(client, settings, clock, metrics)
            .run(&*health, stop.stopped())
            .await;
    })
}

/// Unix nanoseconds as a `MicroTime`.
pub fn micro_time(ns: i64) -> MicroTime {
    let micros = ns.div_euclid(1_000);
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(micros)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
