//! What the manager does with what a worker tells it ([`Sink`]): a failure at threshold goes to
//! the kill path while the pod is still followed, a startup success triggers the container's
//! readiness worker, and an exited worker is forgotten.

use std::sync::{Arc, Weak};

use super::Inner;
use crate::model::{ContainerInfo, PodInfo};
use crate::probing::worker::Sink;
use crate::probing::worker::handle::{WorkerCtl, WorkerKey};
use crate::spec::{ProbeSpec, ProbeType};

/// What the manager does with what a worker tells it; weak so workers do not keep the manager
/// alive.
pub(super) struct ManagerSink {
    inner: Weak<Inner>,
}

impl ManagerSink {
    pub(super) fn new(inner: &Arc<Inner>) -> Self {
        Self {
            inner: Arc::downgrade(inner),
        }
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
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        // A probe in flight when its pod was removed must not kill (nor count a kill in a series
        // `remove_pod` already deleted): checked and killed as one step of the table, so a
        // removal comes either before (no kill) or after (it forgets this one too).
        inner.pods.while_probed(&pod.uid, || {
            inner.killer.kill(pod, c, key.ty, spec, output);
        });
    }

    fn started(&self, key: &WorkerKey) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        inner
            .pods
            .trigger(&key.pod_uid, &key.container, ProbeType::Readiness);
    }

    fn exited(&self, key: &WorkerKey, ctl: &Arc<WorkerCtl>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if inner.pods.remove_worker(key, ctl) {
            inner
                .metrics
                .workers
                .with_label_values(&[key.ty.name()])
                .dec();
        }
    }
}
