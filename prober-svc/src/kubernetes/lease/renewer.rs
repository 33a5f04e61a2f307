//! The renewal itself: kubelet's node-lease algorithm on the lease's own client, in a loop of
//! its own ([`spawn`]).

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
use tokio::task::JoinHandle;

use super::health::{Blind, Health};
use super::labels::{NODE_LEASE_LABEL, PROBLEMS_ANNOTATION, ZONE_LABEL};
use super::metrics::LeaseMetrics;
use super::node::{self, NodeFacts};
use crate::clock::Clock;
use crate::kubernetes::client;
use crate::kubernetes::limit::TokenBucket;
use crate::kubernetes::vouch::Vouch;

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
    /// The duration of the last renewal at shutdown ([`handover`]); `None`: no hand-over.
    pub handover: Option<Duration>,
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

/// First wait of [`Renewer::ensure`]'s backoff (kubelet's `backoffEnsureLease`: doubling from
/// here up to [`ENSURE_MAX_BACKOFF`]).
const ENSURE_FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait of [`Renewer::ensure`]'s backoff (kubelet's `maxBackoff`).
const ENSURE_MAX_BACKOFF: Duration = Duration::from_secs(7);
/// How often a prober that cannot vouch asks again (so the first renewal after start comes as
/// soon as the pod source is read, not an interval later).
const BLIND_RECHECK: Duration = Duration::from_millis(250);

/// Keeps one node's lease.
pub struct Renewer {
    api: Api<Lease>,
    /// The lease's settings (the hand-over at shutdown shortens its duration).
    pub(super) settings: LeaseSettings,
    clock: Clock,
    /// Its counters (the hand-over counts itself here too).
    pub(super) metrics: LeaseMetrics,
    /// The lease as the last answer had it (replaced without a read when it is current).
    cached: Option<Lease>,
    nodes: Api<Node>,
    /// The Node as last read (`None`: not read yet; read again while its uid is unknown).
    node: Option<NodeFacts>,
    vouch: Option<Vouch>,
    /// Per-pod or transient problems to write on the lease.
    problems: Vec<String>,
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
            node: None,
            vouch: None,
            problems: Vec::new(),
        }
    }

    /// Tells `vouch` of every successful renewal.
    pub fn with_vouch(mut self, vouch: Vouch) -> Self {
        self.vouch = Some(vouch);
        self
    }

    /// Renews at once, then every interval while `health` says the prober can vouch, until
    /// `shutdown`; then hands the lease over ([`handover`]) when one is set. Never returns an
    /// error: failures are counted, logged at their first occurrence, and retried at the next
    /// interval.
    pub async fn run(mut self, health: &dyn Health, shutdown: impl Future<Output = ()>) {
        let vouching = self.renew_until(health, shutdown).await;
        self.hand_over(health, vouching).await;
    }

    /// The renewal loop of [`Renewer::run`]; whether the last renewal succeeded when
    /// `shutdown` came.
    async fn renew_until(
        &mut self,
        health: &dyn Health,
        shutdown: impl Future<Output = ()>,
    ) -> bool {
        tokio::pin!(shutdown);
        let mut was_blind: Option<Blind> = None;
        let mut ever_current = false;
        let mut failing = false;
        let mut ever_renewed = false;
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = &mut shutdown => return !failing && ever_renewed,
                () = tokio::time::sleep_until(next) => {}
            }
            match health.check() {
                Err(why) => {
                    self.metrics.healthy.set(0);
                    self.metrics.renewals.with_label_values(&["skipped"]).inc();
                    if was_blind.as_ref() != Some(&why) {
                        // A prober that is starting is not current yet: that is no news.
                        if ever_current {
                            tracing::warn!(node = %self.settings.node, reason = %why,
                                "not renewing the node lease: this prober cannot vouch for probing on its node");
                        } else {
                            tracing::info!(node = %self.settings.node, reason = %why,
                                "the node lease waits until this prober can vouch for probing");
                        }
                        was_blind = Some(why);
                    }
                    next = tokio::time::Instant::now()
                        + BLIND_RECHECK.min(self.settings.renew_interval);
                    ever_renewed = false;
                    continue;
                }
                Ok(()) => {
                    self.metrics.healthy.set(1);
                    ever_current = true;
                    if was_blind.take().is_some() {
                        tracing::info!(node = %self.settings.node, "vouching again; renewing the node lease");
                    }
                }
            }
            // The next renewal is due an interval after this one started, as kubelet's
            // `wait.Until` paces its heartbeat.
            next = tokio::time::Instant::now() + self.settings.renew_interval;
            self.problems = health.problems();
            let renewal = self.renew();
            let result = tokio::select! {
                // A renewal cut short by shutdown: the hand-over takes its place.
                () = &mut shutdown => return !failing && ever_renewed,
                r = renewal => r,
            };
            match result {
                Ok(()) => {
                    ever_renewed = true;
                    self.metrics.renewals.with_label_values(&["ok"]).inc();
                    self.metrics
                        .last_renewal
                        .set(self.clock.now_ns() / 1_000_000_000);
                    if let Some(v) = &self.vouch {
                        v.renewed();
                    }
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

    /// One renewal, kubelet's `sync`: update the cached lease ([`MAX_TRIES`] tries); failing
    /// that (or without one), make sure the lease exists (reading it, creating it when missing,
    /// retried with backoff within one lease duration) and update that.
    pub async fn renew(&mut self) -> Result<(), RenewError> {
        self.read_node().await;
        if let Some(base) = self.cached.take() {
            match self.retry_update(base).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!(node = %self.settings.node, error = %e,
                        "updating the cached node lease failed; reading it again");
                }
            }
        }
        let deadline = tokio::time::Instant::now() + self.settings.duration;
        let (base, created) = self.ensure(deadline).await?;
        if created {
            return Ok(());
        }
        self.retry_update(base).await
    }

    /// kubelet's `retryUpdateLease`: up to [`MAX_TRIES`] updates; a conflict reads the lease
    /// again first (it changed under us), any other failure retries with the same base.
    async fn retry_update(&mut self, mut base: Lease) -> Result<(), RenewError> {
        let mut last = RenewError::Conflicts;
        for _ in 0..MAX_TRIES {
            let next = self.renewed(base.clone());
            match self
                .api
                .replace(&self.settings.node, &PostParams::default(), &next)
                .await
            {
                Ok(l) => {
                    self.cached = Some(l);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    tracing::debug!(node = %self.settings.node, message = %s.message,
                        "node lease conflict; reading it again");
                    let deadline = tokio::time::Instant::now() + self.settings.duration;
                    let (fresh, created) = self.ensure(deadline).await?;
                    if created {
                        return Ok(());
                    }
                    base = fresh;
                    last = RenewError::Conflicts;
                }
                Err(e) => {
                    tracing::debug!(node = %self.settings.node, error = %e, "node lease update failed");
                    last = RenewError::Api(e);
                }
            }
        }
        Err(last)
    }

    /// kubelet's `backoffEnsureLease`: the lease as the API has it, created when missing (true
    /// then); failures retried with a doubling backoff until `deadline`.
    async fn ensure(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Result<(Lease, bool), RenewError> {
        let mut sleep = ENSURE_FIRST_BACKOFF;
        loop {
            let got = match self.api.get_opt(&self.settings.node).await {
                Ok(Some(l)) => Ok((l, false)),
                Ok(None) => match self.api.create(&PostParams::default(), &self.fresh()).await {
                    Ok(l) => {
                        self.cached = Some(l.clone());
                        Ok((l, true))
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match got {
                Ok(r) => return Ok(r),
                // Created by someone else between our read and our create: read again now.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => {
                    tracing::debug!(node = %self.settings.node, error = %e, retry_in_ms = sleep.as_millis() as u64,
                        "cannot read or create the node lease; retrying");
                    if tokio::time::Instant::now() + sleep >= deadline {
                        return Err(RenewError::Api(e));
                    }
                    tokio::time::sleep(sleep).await;
                    sleep = (sleep * 2).min(ENSURE_MAX_BACKOFF);
                }
            }
        }
    }

    /// Reads the Node while its uid is unknown (kubelet reads it for every lease without an
    /// owner); the zone is taken from the first read that answers.
    async fn read_node(&mut self) {
        if self.node.as_ref().is_some_and(|n| n.uid.is_some()) {
            return;
        }
        match node::read(&self.nodes, &self.settings.node).await {
            Ok(Some(facts)) => {
                tracing::info!(node = %self.settings.node, zone = facts.zone.as_deref().unwrap_or(""),
                    "the node lease is owned by its Node and carries its zone");
                self.node = Some(facts);
            }
            Ok(None) => {
                if self.node.is_none() {
                    tracing::info!(node = %self.settings.node,
                        "cannot read this node's Node (missing, or no RBAC): the node lease has no owner and no zone; asked again at each renewal");
                }
                self.node = Some(NodeFacts::default());
            }
            Err(e) => {
                tracing::debug!(node = %self.settings.node, error = %e, "reading the Node failed");
            }
        }
    }

    /// This lease's labels, owner and annotations: the node-lease label, the zone when known,
    /// the Node as owner once read (kept when the lease has one), the problems when any.
    fn decorate(&self, meta: &mut ObjectMeta) {
        let labels = meta.labels.get_or_insert_with(Default::default);
        labels.insert(NODE_LEASE_LABEL.to_owned(), "true".to_owned());
        if let Some(zone) = self.node.as_ref().and_then(|n| n.zone.clone()) {
            labels.insert(ZONE_LABEL.to_owned(), zone);
        }
        if meta.owner_references.as_ref().is_none_or(Vec::is_empty)
            && let Some(owner) = self
                .node
                .as_ref()
                .and_then(|n| n.owner(&self.settings.node))
        {
            meta.owner_references = Some(vec![owner]);
        }
        if self.problems.is_empty() {
            if let Some(a) = meta.annotations.as_mut() {
                a.remove(PROBLEMS_ANNOTATION);
            }
        } else {
            meta.annotations
                .get_or_insert_with(Default::default)
                .insert(PROBLEMS_ANNOTATION.to_owned(), self.problems.join("; "));
        }
    }

    /// A new lease for this node.
    fn fresh(&self) -> Lease {
        let mut meta = ObjectMeta {
            name: Some(self.settings.node.clone()),
            namespace: Some(self.settings.namespace.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "podward-prober".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        self.decorate(&mut meta);
        Lease {
            metadata: meta,
            spec: Some(self.spec(None)),
        }
    }

    /// `base` with this node as holder and a new renewal.
    fn renewed(&self, mut base: Lease) -> Lease {
        let transitions = base.spec.as_ref().and_then(|s| s.lease_transitions);
        base.spec = Some(self.spec(transitions));
        self.decorate(&mut base.metadata);
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
/// token bucket of its own) and renews the node lease until `stop` is triggered, telling
/// `vouch` of each renewal; then hands it over ([`handover`]) when the settings say so.
pub fn spawn(
    settings: LeaseSettings,
    kubeconfig: Option<PathBuf>,
    health: Arc<dyn Health>,
    vouch: Vouch,
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
                let deadline = settings.renew_interval;
                let deadlines = client::Deadlines::within(deadline, deadline);
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
            "renewing the node lease while this prober can vouch for probing on its node");
        Renewer::new(client, settings, clock, metrics)
            .with_vouch(vouch)
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
