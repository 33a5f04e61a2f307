//! What the manager does with what a worker tells it ([`Sink`]): a failure at threshold goes to
//! the kill path while the pod is still followed, a startup success triggers the container's
//! readiness worker, and an exited worker is forgotten; each through the [`Reconciler`].

use std::sync::{Arc, Weak};

use super::reconciler::Reconciler;
use crate::model::{ContainerInfo, PodInfo};
use crate::probing::worker::Sink;
use crate::probing::worker::handle::{WorkerCtl, WorkerKey};
use crate::spec::ProbeSpec;

/// What the manager does with what a worker tells it; weak so workers do not keep the manager
/// alive.
pub(super) struct ManagerSink {
    rec: Weak<Reconciler>,
}

impl ManagerSink {
    /// The sink of the reconciler `rec`.
    pub(super) fn new(rec: Weak<Reconciler>) -> Self {
        Self { rec }
    }
}

impl Sink for ManagerSink {
    fn threshold_failure(
        &self,
        key: &WorkerKey,
        pod: &PodInfo,
        c: &ContainerInfo,
        spec: &ProbeSpec,
        output: &str,
    ) {
        if let Some(rec) = self.rec.upgrade() {
            rec.kill(key, pod, c, spec, output);
        }
    }

    fn started(&self, key: &WorkerKey) {
        if let Some(rec) = self.rec.upgrade() {
            rec.trigger_readiness(&key.pod_uid, &key.container);
        }
    }

    fn exited(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>) {
        if let Some(rec) = self.rec.upgrade() {
            rec.exited(key, ctl);
        }
    }
}
