//! The pods the prober follows and the workers that probe them: what the [`crate::manager`]
//! writes (it alone adds and removes entries) and the [`crate::view`] reads to answer the
//! readiness gate and `Status`. Plain data under locks, no behaviour: keeping it apart is what
//! lets the read side depend on it without depending on the manager.
//!
//! Lock order, where two are held at once: `pods` before `workers`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::model::PodInfo;
use crate::model::api_pod::ApiPod;
use crate::probing::worker::SharedPod;
use crate::probing::worker::handle::{WorkerCtl, WorkerKey, WorkerStatus};
use crate::spec::{ContainerProbes, ProbeSpec, ProbeType, SpecError, StartupGating};

/// How long a pod with a running container may go without a new container before the names of
/// its annotation that no container has are reported (kubelet starts a pod's app containers in
/// one sync, so once they run, a name still missing is a typo or a removed container).
pub const UNKNOWN_CONTAINER_GRACE: Duration = Duration::from_secs(60);

/// A probed pod.
pub(crate) struct PodEntry {
    /// The pod as its workers see it.
    pub(crate) shared: SharedPod,
    /// The annotation's errors (invalid, refused or deferred probes).
    pub(crate) spec_errors: Vec<SpecError>,
    /// How many of `spec_errors` (the first ones) make the annotation invalid: what the API
    /// server would refuse or this node refuses to run, not findings on valid probes.
    pub(crate) invalid: usize,
    /// Whether each container's startup probe gates its liveness and readiness.
    pub(crate) startup: BTreeMap<String, StartupGating>,
    /// The annotation text the workers were built from.
    pub(crate) annotation: String,
    /// The annotation's probes per container name, for the names the pod has or may still get
    /// (an unknown name's probes are not kept: they are parsed again if its container appears).
    pub(crate) probes: BTreeMap<String, ContainerProbes>,
    /// Names of the annotation with no such container in the pod: spec errors, no workers.
    pub(crate) unknown: UnknownNames,
}

impl PodEntry {
    /// The errors that make the annotation invalid (unknown names included): each one holds a
    /// gated pod not ready.
    pub(crate) fn invalid_errors(&self) -> Vec<SpecError> {
        self.spec_errors[..self.invalid.min(self.spec_errors.len())]
            .iter()
            .cloned()
            .chain(self.unknown.errors())
            .collect()
    }

    /// Every spec error of the pod: the annotation's and one per unknown name.
    pub(crate) fn all_errors(&self) -> Vec<SpecError> {
        self.spec_errors
            .iter()
            .cloned()
            .chain(self.unknown.errors())
            .collect()
    }
}

/// A running worker.
pub(crate) struct WorkerEntry {
    /// Its control handle (stop, trigger, spec update).
    pub(crate) ctl: Arc<WorkerCtl>,
    /// Its status as `Status` reports it (the worker writes it).
    pub(crate) status: Arc<Mutex<WorkerStatus>>,
    /// The spec it runs (compared when the annotation changes).
    pub(crate) spec: Arc<ProbeSpec>,
    /// Whether its container's startup probe gates it.
    pub(crate) startup: StartupGating,
}

/// A pod's annotation names that no container of the pod has (`crate::manager`'s unknown-name
/// check finds them: at once when the API's pod spec lacks them, else after
/// [`UNKNOWN_CONTAINER_GRACE`]).
#[derive(Debug, Default)]
pub(crate) struct UnknownNames {
    /// Names reported unknown (no workers, no probes kept).
    pub(crate) names: BTreeSet<String>,
    /// Names of `probes` whose workers wait for the pod to have such a container (in CRI, or in
    /// the API's pod spec): a name gets workers only once the pod has it.
    pub(crate) pending: BTreeSet<String>,
    /// When a container name first appeared in the pod last (the grace runs from there).
    pub(crate) last_new: Option<Instant>,
    /// Names of containers seen so far.
    pub(crate) seen: BTreeSet<String>,
    /// Whether a check task is waiting.
    pub(crate) scheduled: bool,
}

impl UnknownNames {
    /// The spec error of each unknown name.
    pub(crate) fn errors(&self) -> impl Iterator<Item = SpecError> + '_ {
        self.names.iter().map(|n| unknown_name_error(n))
    }
}

/// The spec error of annotation name `name` that no container of the pod has.
pub(crate) fn unknown_name_error(name: &str) -> SpecError {
    SpecError {
        container: name.to_owned(),
        field: String::new(),
        message: format!(
            "no container named {name:?} in this pod (not in its spec, or none appeared within \
             {}s of its containers running); its probes are not run",
            UNKNOWN_CONTAINER_GRACE.as_secs()
        ),
    }
}

/// Pods and workers, each map under its own lock.
#[derive(Default)]
pub struct Registry {
    /// Probed pods by UID.
    pub(crate) pods: Mutex<HashMap<String, PodEntry>>,
    /// Pods without probes, as the source last showed them: an annotation added later through
    /// the API starts probing them.
    pub(crate) idle: Mutex<HashMap<String, PodInfo>>,
    /// What the Kubernetes API says of each pod on the node (the reflector's view).
    pub(crate) api: Mutex<HashMap<String, Arc<ApiPod>>>,
    /// Running workers, ordered so that a pod's workers are one range.
    pub(crate) workers: Mutex<BTreeMap<WorkerKey, WorkerEntry>>,
}

impl Registry {
    /// Number of running workers.
    pub fn worker_count(&self) -> usize {
        self.workers.lock().len()
    }

    /// UIDs of the pods the manager follows.
    pub fn pod_uids(&self) -> Vec<String> {
        self.pods.lock().keys().cloned().collect()
    }

    /// Number of pods the API shows on this node.
    pub fn api_pod_count(&self) -> usize {
        self.api.lock().len()
    }

    /// UIDs of the pods the API shows on this node.
    pub fn api_pod_uids(&self) -> Vec<String> {
        self.api.lock().keys().cloned().collect()
    }
}

/// The workers of pod `uid` in `workers`, by container name then probe type.
pub(crate) fn pod_workers<'a>(
    workers: &'a BTreeMap<WorkerKey, WorkerEntry>,
    uid: &'a str,
) -> impl Iterator<Item = (&'a WorkerKey, &'a WorkerEntry)> + 'a {
    let first = WorkerKey {
        pod_uid: uid.to_owned(),
        container: String::new(),
        ty: ProbeType::Liveness,
    };
    workers
        .range(first..)
        .take_while(move |(k, _)| k.pod_uid == uid)
}

/// The worker for (`uid`, `container`, `ty`), if it runs.
pub(crate) fn worker<'a>(
    workers: &'a BTreeMap<WorkerKey, WorkerEntry>,
    uid: &str,
    container: &str,
    ty: ProbeType,
) -> Option<&'a WorkerEntry> {
    workers.get(&WorkerKey {
        pod_uid: uid.to_owned(),
        container: container.to_owned(),
        ty,
    })
}
