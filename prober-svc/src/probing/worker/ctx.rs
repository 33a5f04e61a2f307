//! What every worker shares ([`Ctx`], built once by the manager from what it is given) and what
//! a worker tells the manager ([`Sink`]).

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use super::handle::{WorkerCtl, WorkerKey};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::model::{ContainerInfo, PodInfo};
use crate::probing::results::Results;
use crate::probing::runner::ProbeRunner;
use crate::probing::starvation::StarvationMeter;
use crate::publish::event::Events;
use crate::spec::ProbeSpec;

/// What a worker tells the manager: only what the manager acts on (a kill, a readiness
/// trigger, forgetting the worker). Everything else a worker publishes itself as an
/// [`crate::publish::event::Event`].
pub trait Sink: Send + Sync + 'static {
    /// A liveness or startup probe reached its failure threshold on a running container: kill it.
    fn threshold_failure(
        &self,
        key: &WorkerKey,
        pod: &PodInfo,
        container: &ContainerInfo,
        spec: &ProbeSpec,
        output: &str,
    );
    /// A startup probe succeeded: readiness should be probed now (kubelet's manual trigger).
    fn started(&self, key: &WorkerKey);
    /// The worker's loop ended (it was stopped).
    fn exited(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>);
}

/// What every worker shares.
pub struct Ctx {
    /// The results cache (the view reads it too).
    pub results: Arc<Results>,
    /// The probe handlers.
    pub runner: Arc<dyn ProbeRunner>,
    /// Time.
    pub clock: Clock,
    /// What the manager must act on.
    pub sink: Arc<dyn Sink>,
    /// Where workers publish result changes and the probes kubelet records.
    pub events: Events,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The prober's own starvation; `None`, every timeout counts (kubelet's behaviour).
    pub starvation: Option<Arc<dyn StarvationMeter>>,
    /// When a starved probe was last logged at WARN (Unix ns): once per
    /// [`super::STARVED_LOG_EVERY`] for the whole node, since a starved prober has thousands of
    /// workers starved at once and a line from each would starve it further.
    pub starved_logged_at_ns: AtomicI64,
}

impl Ctx {
    /// The context of a manager's workers: they read and publish results in `results`, probe
    /// through `runner`, tell `sink` what the manager acts on, publish on `events`, count in
    /// `metrics`, and measure the prober's own starvation with `starvation` when given.
    pub fn new(
        results: Arc<Results>,
        runner: Arc<dyn ProbeRunner>,
        clock: Clock,
        sink: Arc<dyn Sink>,
        events: Events,
        metrics: Arc<Metrics>,
        starvation: Option<Arc<dyn StarvationMeter>>,
    ) -> Self {
        Self {
            results,
            runner,
            clock,
            sink,
            events,
            metrics,
            starvation,
            starved_logged_at_ns: AtomicI64::new(i64::MIN),
        }
    }
}
