//! kubelet's probe manager, as a reconciler of wanted against running workers. Workers per
//! (pod, container, probe type) appear when a pod with a `podward.io/probes` annotation appears
//! and go with it. Each entry point records its input in the [`PodTable`] (a source's pod, the
//! API's view of it, a removal), then reconciles that pod (`reconciler.rs`): the pod's wanted
//! workers are decided from its entry alone (`wanted.rs`, pure), and the table brings the running
//! ones to them. Workers publish their own events and status; the manager hears only what it
//! must act on ([`crate::probing::worker::Sink`], in `sink.rs`): a failure at threshold (to the
//! kill path), a startup success (a readiness trigger) and a worker's exit. What the prober knows
//! of a pod is read through the [`View`].
//!
//! Like kubelet, adding a pod is idempotent and later spec changes seen through CRI are ignored
//! (a worker key that exists is skipped *per key*, not for the rest of the pod: kubelet's
//! early `return` there is a known bug, kubernetes#139888). CRI's copy of the annotation is
//! frozen at sandbox creation anyway; the Kubernetes API's copy is not: when the reflector hands
//! the manager a pod ([`Manager::set_api_pod`]), the API's annotation wins, and an edit of it
//! applies to the running pod (probes added, removed or updated in place, as kubelet's
//! `MutableContainerProbes` does). A worker that ended on its own (its container will not run
//! again) is not started again until the annotation changes.

use std::collections::HashSet;
use std::sync::Arc;

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::metrics::Metrics;
use crate::model::PodInfo;
use crate::model::api_pod::ApiPod;
use crate::pods::pod_table::{PodTable, Upsert};
use crate::pods::view::View;
use crate::probing::runner::ProbeRunner;
use crate::probing::worker::Sink;
use crate::publish::event::Events;
use crate::spec::ProbeType;

use self::reconciler::Reconciler;
use self::refresh::refresh;
use self::sink::ManagerSink;

mod annotation;
mod conflicts;
mod entry;
mod reconciler;
mod refresh;
mod settings;
mod sink;
mod taken_over;
mod unknown;
mod wanted;

pub use self::settings::Settings;
pub use crate::pods::pod_table::UNKNOWN_CONTAINER_GRACE;

/// The probe manager. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    rec: Arc<Reconciler>,
    view: View,
}

impl Manager {
    /// A manager with no pods: workers probe through `runner` and publish to `events`,
    /// failures at threshold go to `killer`; `settings` are this node's for probing.
    pub fn new(
        runner: Arc<dyn ProbeRunner>,
        killer: Killer,
        events: Events,
        metrics: Arc<Metrics>,
        clock: Clock,
        settings: Settings,
    ) -> Self {
        let rec = Reconciler::new(
            runner.clone(),
            killer.clone(),
            events,
            metrics,
            clock,
            settings,
            |rec| Arc::new(ManagerSink::new(rec)) as Arc<dyn Sink>,
        );
        let view = View::new(
            rec.table().clone(),
            rec.results().clone(),
            killer,
            runner,
            clock,
        );
        Self { rec, view }
    }

    /// The prober's metrics (for tests and the embedding).
    pub fn metrics(&self) -> &Metrics {
        self.rec.metrics()
    }

    /// What the prober knows of its pods: readiness for the gate, `Status` for the API.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The pods and workers the manager keeps.
    pub fn registry(&self) -> &PodTable {
        self.rec.table()
    }

    /// Replaces the whole view (a source snapshot): pods not in `pods` are removed, the others
    /// added or updated. Workers of pods that stay keep their counters.
    pub fn sync_all(&self, pods: Vec<PodInfo>) {
        let keep: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
        for uid in self.rec.table().uids_not_in(&keep) {
            self.remove_pod(&uid);
        }
        for p in pods {
            self.update_pod(p);
        }
    }

    /// Adds a pod or refreshes its containers and fields, then reconciles it. Probe specs of a
    /// known pod are kept unless the API's copy of its annotation changed; a container that
    /// just started gets its readiness probed at once.
    pub fn update_pod(&self, mut pod: PodInfo) {
        let table = self.rec.table();
        pod.api = table.api(&pod.uid);
        let uid = pod.uid.clone();
        match table.upsert(pod, refresh, |pod| self.rec.new_entry(pod)) {
            Upsert::Known(changed) => {
                if let Some(annotation) = changed.annotation
                    && !self.rec.reannotate(&uid, annotation)
                {
                    return; // no probes any more: kept idle
                }
                self.rec.reconcile(&uid);
                // kubelet's pod sync after a container start triggers the readiness worker at
                // once.
                for name in changed.started {
                    table.trigger(&uid, &name, ProbeType::Readiness);
                }
            }
            Upsert::Added => self.rec.reconcile(&uid),
            Upsert::Idle => {} // not probed (yet)
        }
    }

    /// Takes the Kubernetes API's view of a pod (the reflector's): its annotation wins over
    /// CRI's, its restart policy, phase, deletion and preStop hooks reach the workers and the
    /// kill path. The first view of a pod whose probes were taken over may announce it
    /// (`ProbesTakenOver`, see `taken_over.rs`).
    pub fn set_api_pod(&self, api: ApiPod) {
        let table = self.rec.table();
        let uid = api.uid.clone();
        let api = Arc::new(api);
        if table.set_api(api.clone()) {
            taken_over::announce(&api, self.rec.events(), self.rec.now_ns());
        }
        if let Some(pod) = table.pod(&uid) {
            self.update_pod(pod);
        }
    }

    /// Forgets the API's view of pod `uid` (deleted, or gone from a relist). Its workers keep
    /// running until CRI says the pod is gone, with the specs they have: what a pod wants is
    /// decided when its annotation is parsed, and that stays.
    pub fn remove_api_pod(&self, uid: &str) {
        self.rec.table().clear_api(uid);
    }

    /// Stops a pod's workers and forgets it (kubelet's `RemovePod`). Idempotent.
    pub fn remove_pod(&self, uid: &str) -> bool {
        self.rec.remove(uid)
    }

    /// Stops the workers of the given pods (kubelet's `CleanupPods`, told by the housekeeper);
    /// returns those that were known.
    pub fn cleanup(&self, gone: &[String]) -> Vec<String> {
        gone.iter()
            .filter(|u| self.remove_pod(u))
            .cloned()
            .collect()
    }

    /// Stops every worker (shutdown).
    pub fn stop_all(&self) {
        for uid in self.rec.table().pod_uids() {
            self.remove_pod(&uid);
        }
    }
}
