//! What one worker keeps between its ticks, and the value it starts from.

use std::sync::Arc;

use super::ctx::Ctx;
use super::handle::{StatusPublisher, WorkerCtl, WorkerKey};
use crate::handler::pod_sockets::PodShare;
use crate::metrics::WorkerMetrics;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo};
use crate::probing::pod_view::PodView;
use crate::probing::results::SlotMemo;
use crate::spec::{ProbeSpec, ProbeType, StartupGating};

/// kubelet's `initialValue` per probe type.
pub fn initial_value(ty: ProbeType) -> ProbeResult {
    match ty {
        ProbeType::Liveness => ProbeResult::Success,
        ProbeType::Readiness => ProbeResult::Failure,
        ProbeType::Startup => ProbeResult::Unknown,
    }
}

/// One worker. Built by the manager, consumed by [`Worker::run`].
pub struct Worker {
    pub(super) key: WorkerKey,
    pub(super) spec: Arc<ProbeSpec>,
    pub(super) startup: StartupGating,
    pub(super) pod: Arc<PodView>,
    pub(super) ctx: Arc<Ctx>,
    pub(super) ctl: Arc<WorkerCtl>,
    pub(super) status: StatusPublisher,
    pub(super) metrics: WorkerMetrics,
    pub(super) container_id: Option<Arc<str>>,
    /// The pod's share of the runner's per-pod bound, held from the worker's start to its end
    /// so a probe takes its place in the pod's count without a lookup.
    pub(super) pod_share: Option<PodShare>,
    /// What this worker last wrote to its results slot (cleared with a new instance), so a
    /// steady result is not written again under the cache's lock.
    pub(super) published: Option<SlotMemo>,
    /// The pod view this worker last read, while it is current: a view is replaced whole,
    /// never changed in place, so while its version is the same so is the container's lookup.
    /// A replaced view is kept until the worker's next tick (at most one per worker).
    pub(super) seen: Option<Seen>,
    pub(super) last_result: Option<ProbeResult>,
    pub(super) result_run: u32,
    pub(super) on_hold: bool,
    /// A spec update changed the period: the loop restarts its ticker.
    pub(super) period_changed: bool,
}

/// A pod view as a worker read it.
pub(super) struct Seen {
    /// The view's version when it was read.
    pub(super) version: u64,
    pub(super) pod: Arc<PodInfo>,
    /// The current instance of the worker's container in `pod`.
    pub(super) container: Option<Arc<ContainerInfo>>,
}
