//! What the Kubernetes API says of a pod that CRI does not carry: its restart policy, which init
//! containers are sidecars, its readiness gate and that condition's current value, the preStop
//! hooks, the phase, whether it is being deleted, and which probes a takeover moved out of its
//! containers' spec (`podward.io/probes-moved`). CRI (the shim, containerd) stays the source
//! of truth for what runs; an [`ApiPod`] only adds to it, and everything works without one.
//!
//! Kept small on purpose: one per pod on the node, built from the reflector's `Pod` objects and
//! holding only what the prober uses (docs/prober.md, "The Kubernetes API").

use std::time::Duration;

use crate::spec::{HttpGetSpec, ProbeType};

/// A pod as the API server has it, reduced to what the prober uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPod {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion` of the object this was built from.
    pub resource_version: String,
    /// `spec.restartPolicy`.
    pub restart_policy: RestartPolicy,
    /// `status.phase`.
    pub phase: PodPhase,
    /// `metadata.deletionTimestamp` is set: the pod is terminating.
    pub deleting: bool,
    /// `spec.terminationGracePeriodSeconds`.
    pub grace_seconds: Option<i64>,
    /// `metadata.deletionGracePeriodSeconds` (set with the deletion timestamp): the grace of
    /// every kill of a pod being deleted.
    pub deletion_grace_seconds: Option<i64>,
    /// The `podward.io/probes` annotation now (annotations are mutable, unlike CRI's copy).
    pub probes_annotation: Option<String>,
    /// `spec.readinessGates` lists the prober's condition type.
    pub gated: bool,
    /// The prober's condition in `status.conditions`, if present.
    pub condition: Option<GateCondition>,
    /// Containers and init containers with what the prober needs of them.
    pub containers: Vec<ApiContainer>,
}

/// One container of the pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiContainer {
    /// `name`.
    pub name: String,
    /// Where it is declared and how it restarts.
    pub kind: ContainerKind,
    /// `lifecycle.preStop`, if any.
    pub pre_stop: Option<Hook>,
    /// The probe types the container spec itself declares (kubelet runs those).
    pub spec_probes: Vec<ProbeType>,
    /// The probe types `podward.io/probes-moved` records as moved out of this container's spec
    /// into `podward.io/probes` (by the takeover webhook or `migrate`): each at most once, in the
    /// spec's field order (liveness, readiness, startup); a record naming no container of the
    /// pod costs nothing.
    pub moved_probes: Vec<ProbeType>,
}

/// Where a container is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.containers[]`.
    Regular,
    /// `spec.initContainers[]` with `restartPolicy: Always`: a sidecar, probed and restarted like
    /// a regular container whatever the pod's restart policy (kubelet since 1.29).
    Sidecar,
    /// Any other `spec.initContainers[]` entry: never probed by kubelet.
    Init,
    /// `spec.ephemeralContainers[]` (`kubectl debug`): the API refuses probes on them; never
    /// probed.
    Ephemeral,
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Restart every exited container (the API's default).
    #[default]
    Always,
    /// Restart containers that failed.
    OnFailure,
    /// Never restart.
    Never,
}

/// `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodPhase {
    /// Not all containers have started yet.
    #[default]
    Pending,
    /// Bound and at least one container runs.
    Running,
    /// Every container ended successfully and will not restart.
    Succeeded,
    /// Every container ended and at least one failed.
    Failed,
    /// The state could not be obtained.
    Unknown,
}

/// `status` of a pod condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"` (or anything else the API holds).
    Unknown,
}

impl ConditionStatus {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// From the API's spelling.
    pub fn parse(s: &str) -> Self {
        match s {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }
}

/// The prober's readiness-gate condition as the API holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCondition {
    /// `status`.
    pub status: ConditionStatus,
    /// `reason` ("" when absent).
    pub reason: String,
    /// `message` ("" when absent).
    pub message: String,
    /// `lastTransitionTime` as written (RFC 3339), "" when absent.
    pub last_transition_time: String,
}

/// A container lifecycle handler (`lifecycle.preStop`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// `exec.command`, run in the container (no `$(VAR)` expansion: kubelet does none for hooks).
    Exec {
        /// argv.
        command: Vec<String>,
    },
    /// `httpGet`, sent like an HTTP probe's request.
    HttpGet(HttpGetSpec),
    /// `sleep.seconds`.
    Sleep(Duration),
    /// A handler kubelet cannot run either (`tcpSocket`, none, an invalid one): running it fails
    /// with this message, as kubelet's does.
    Invalid(String),
}

impl ApiPod {
    /// The spec entry of container `name`.
    pub fn container(&self, name: &str) -> Option<&ApiContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// Whether an exited instance of container `name` will be started again: sidecars always,
    /// others unless the pod's policy is `Never` (kubelet's worker stops only then; `OnFailure`
    /// keeps its workers, as kubelet's does).
    pub fn restarts(&self, name: &str) -> bool {
        match self.container(name).map(|c| c.kind) {
            Some(ContainerKind::Sidecar) => true,
            _ => self.restart_policy != RestartPolicy::Never,
        }
    }

    /// The pod has ended (`Succeeded` or `Failed`): kubelet's workers exit.
    pub fn finished(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// The preStop hook of container `name`, if any.
    pub fn pre_stop(&self, name: &str) -> Option<&Hook> {
        self.container(name)?.pre_stop.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(policy: RestartPolicy) -> ApiPod {
        ApiPod {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "p".into(),
            resource_version: "1".into(),
            restart_policy: policy,
            phase: PodPhase::Running,
            deleting: false,
            grace_seconds: None,
            deletion_grace_seconds: None,
            probes_annotation: None,
            gated: false,
            condition: None,
            containers: vec![
                ApiContainer {
                    name: "app".into(),
                    kind: ContainerKind::Regular,
                    pre_stop: None,
                    spec_probes: Vec::new(),
                    moved_probes: Vec::new(),
                },
                ApiContainer {
                    name: "proxy".into(),
                    kind: ContainerKind::Sidecar,
                    pre_stop: None,
                    spec_probes: Vec::new(),
                    moved_probes: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn only_never_stops_restarts_and_sidecars_always_restart() {
        assert!(pod(RestartPolicy::Always).restarts("app"));
        assert!(pod(RestartPolicy::OnFailure).restarts("app"));
        assert!(!pod(RestartPolicy::Never).restarts("app"));
        assert!(pod(RestartPolicy::Never).restarts("proxy"));
    }
}
