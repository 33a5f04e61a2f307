//! A pod's readiness as the readiness gate sees it: every container with a podward readiness
//! probe ready, every container with a podward startup probe started.
//!
//! Unlike `Status` (kubelet's `UpdatePodStatus`, which calls a container that ran before this
//! prober "ready" until a verdict), this never guesses: a container whose readiness this prober
//! has not yet established is [`PodReadiness::Unknown`], and the gate then keeps the condition
//! the API has. That is what makes a prober restart invisible to Services in both directions
//! (docs/prober.md, "The readiness gate").

use std::collections::BTreeSet;
use std::sync::Arc;

use super::View;
use crate::model::api_pod::PodPhase;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, RunState};
use crate::pods::pod_table::WorkerEntry;
use crate::probing::worker::started_before_restart;
use crate::spec::{ProbeType, spec_invalid_message};

/// Longest condition message the prober writes (a probe's output can be 10 KiB).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// What the prober knows of a pod's readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodReadiness {
    /// The prober does not probe this pod (no sandbox yet, or no `podward.io/probes`).
    NotProbed,
    /// Some container's readiness is not established since this prober started (and none is
    /// known to be unready): keep what the API has.
    Unknown,
    /// Every container with a readiness probe is ready, every one with a startup probe started.
    Ready,
    /// At least one is not.
    NotReady {
        /// The (first, by name) container that is not ready.
        container: String,
        /// The condition's `reason`.
        reason: &'static str,
        /// The condition's `message`: the container and kubelet's probe message.
        message: String,
    },
}

/// Condition reason: a readiness probe fails (or has not succeeded yet).
pub const REASON_READINESS: &str = "ReadinessProbeFailed";
/// Condition reason: a startup probe has not succeeded.
pub const REASON_STARTUP: &str = "StartupProbeNotSucceeded";
/// Condition reason: the `podward.io/probes` annotation is invalid (the API server would refuse
/// it, or this node refuses to run one of its probes), so the pod's readiness is not checked as
/// asked. The message names the container, the field and the error.
pub const REASON_SPEC_INVALID: &str = crate::publish::event::REASON_PROBE_SPEC_INVALID;
/// Condition reason: the container does not run.
pub const REASON_NOT_RUNNING: &str = "ContainerNotRunning";
/// Condition reason of a pod whose phase is `Succeeded` (kubelet's `PodCompleted`, the reason of
/// its `ContainersReady` and `Ready` conditions then).
pub const REASON_POD_COMPLETED: &str = "PodCompleted";
/// Condition reason of a pod whose phase is `Failed` (kubelet's `PodFailed`).
pub const REASON_POD_FAILED: &str = "PodFailed";

/// One container's state for the gate.
enum ContainerReadiness {
    Ready,
    Unknown,
    NotReady(&'static str, String),
}

/// What the gate reads of one probe worker of a container.
struct WorkerSeen {
    /// Its own probes reached a threshold for this instance (an initial value is none).
    reached_threshold: bool,
    /// The last probe's output, when that probe failed.
    failed_output: Option<String>,
}

impl WorkerSeen {
    fn of(w: &WorkerEntry) -> Self {
        w.status.read(|st| Self {
            reached_threshold: st.reached_threshold,
            failed_output: (st.last_probe_result == Some(ProbeResult::Failure))
                .then(|| st.last_output.clone()),
        })
    }
}

/// One gated container: its current instance and its startup and readiness workers.
struct Gated {
    name: String,
    instance: Option<Arc<ContainerInfo>>,
    startup: Option<WorkerSeen>,
    readiness: Option<WorkerSeen>,
}

impl View {
    /// Pod `uid`'s readiness for the readiness gate.
    ///
    /// The gate's rules (docs/prober.md, "The readiness gate"): a finished pod is not ready,
    /// with kubelet's reason; a pod whose API view has no `podward.io/probes` annotation (never
    /// had one, or it was removed) is ready, as kubelet treats a container without a readiness
    /// probe; a container whose probe workers ended (it exited and will not restart) is judged
    /// by its state, never left out; a gated pod whose annotation is invalid is not ready
    /// ([`REASON_SPEC_INVALID`]), whatever its valid probes say.
    pub fn readiness(&self, uid: &str) -> PodReadiness {
        let api = self.pods.api(uid);
        if let Some(reason) = api.as_ref().and_then(|a| match a.phase {
            PodPhase::Succeeded => Some(REASON_POD_COMPLETED),
            PodPhase::Failed => Some(REASON_POD_FAILED),
            _ => None,
        }) {
            return PodReadiness::NotReady {
                container: String::new(),
                reason,
                message: String::new(),
            };
        }
        if api.as_ref().is_some_and(|a| a.gated)
            && let Some(message) = self.invalid_message(uid)
        {
            return PodReadiness::NotReady {
                container: String::new(),
                reason: REASON_SPEC_INVALID,
                message: truncate(message),
            };
        }
        let Some(gated) = self.gated(uid) else {
            return match api {
                Some(a) if a.probes_annotation.is_none() => PodReadiness::Ready,
                _ => PodReadiness::NotProbed,
            };
        };
        combine(
            gated
                .into_iter()
                .map(|g| {
                    let r = self.container_readiness(&g);
                    (g.name, r)
                })
                .collect(),
        )
    }

    /// Why pod `uid`'s annotation is invalid, if it is: a gated pod fails closed, since what
    /// its readiness was meant to be checked by is not known.
    fn invalid_message(&self, uid: &str) -> Option<String> {
        let errors = self.pods.entry(uid, |e| e.invalid_errors())?;
        (!errors.is_empty()).then(|| spec_invalid_message(&errors))
    }

    /// The containers of pod `uid` that gate its readiness: those with a startup or readiness
    /// worker, and those whose readiness or startup the annotation asks for (workers or not);
    /// `None` if the pod is not probed.
    fn gated(&self, uid: &str) -> Option<Vec<Gated>> {
        let (shared, mut names) = self.pods.entry(uid, |e| {
            let names: BTreeSet<String> = e
                .probes
                .iter()
                .filter(|(n, p)| {
                    (p.readiness.is_some() || p.startup.is_some()) && !e.unknown.names.contains(*n)
                })
                .map(|(n, _)| n.clone())
                .collect();
            (e.shared.clone(), names)
        })?;
        let pod = shared.read().clone();
        let workers = self.pods.workers_of(uid);
        names.extend(
            workers
                .iter()
                .filter(|(_, ty, _)| *ty != ProbeType::Liveness)
                .map(|(c, ..)| c.to_owned()),
        );
        let seen = |name: &str, ty| workers.get(name, ty).map(WorkerSeen::of);
        Some(
            names
                .into_iter()
                .map(|name| Gated {
                    instance: pod.current(&name).cloned(),
                    startup: seen(&name, ProbeType::Startup),
                    readiness: seen(&name, ProbeType::Readiness),
                    name,
                })
                .collect(),
        )
    }

    /// One gated container's readiness: its startup probe first (if any), then its readiness
    /// probe, or its state when it has none.
    fn container_readiness(&self, g: &Gated) -> ContainerReadiness {
        let Some(c) = g.instance.as_deref() else {
            return ContainerReadiness::Unknown;
        };
        let running = c.state == RunState::Running;
        let not_running = || ContainerReadiness::NotReady(REASON_NOT_RUNNING, not_running(&g.name));
        // A container that was running before this prober started, and whose probes have not
        // reached a threshold under this prober: its initial value (kubelet's, for a container
        // within the restart grace) is no result; the API's condition stands.
        let unprobed = |w: &Option<WorkerSeen>| {
            running
                && c.started_at_ns > 0
                && c.started_at_ns < self.clock.start_ns()
                && w.as_ref().is_some_and(|w| !w.reached_threshold)
        };
        let failed = |w: &Option<WorkerSeen>, ty, reason| {
            let output = w.as_ref().and_then(|w| w.failed_output.clone());
            ContainerReadiness::NotReady(reason, probe_message(&g.name, ty, output))
        };
        if g.startup.is_some() {
            match self.results.get(&c.id, ProbeType::Startup) {
                Some(ProbeResult::Success) => {}
                // Started under a previous prober: kubelet keeps such a container started,
                // and its readiness (if any) decides below.
                None if started_before_restart(c, &self.clock) => {}
                None => return ContainerReadiness::Unknown,
                Some(_) if !running => return not_running(),
                Some(_) if unprobed(&g.startup) => return ContainerReadiness::Unknown,
                Some(_) => return failed(&g.startup, ProbeType::Startup, REASON_STARTUP),
            }
        }
        if g.readiness.is_none() {
            // No readiness probe: ready once started (and running).
            return if running {
                ContainerReadiness::Ready
            } else {
                not_running()
            };
        }
        match self.results.get(&c.id, ProbeType::Readiness) {
            None => ContainerReadiness::Unknown,
            Some(ProbeResult::Success) if running => ContainerReadiness::Ready,
            Some(_) if !running => not_running(),
            Some(_) if unprobed(&g.readiness) => ContainerReadiness::Unknown,
            Some(_) => failed(&g.readiness, ProbeType::Readiness, REASON_READINESS),
        }
    }
}

/// The pod's readiness from its containers': not ready if one is (the first by name named),
/// else unknown if one is, else ready.
fn combine(containers: Vec<(String, ContainerReadiness)>) -> PodReadiness {
    let mut unknown = false;
    let mut failing: Vec<(String, &'static str, String)> = Vec::new();
    for (name, r) in containers {
        match r {
            ContainerReadiness::Ready => {}
            ContainerReadiness::Unknown => unknown = true,
            ContainerReadiness::NotReady(reason, message) => failing.push((name, reason, message)),
        }
    }
    if failing.is_empty() {
        return if unknown {
            PodReadiness::Unknown
        } else {
            PodReadiness::Ready
        };
    }
    let more = failing.len() - 1;
    let (container, reason, mut message) = failing.swap_remove(0);
    if more > 0 {
        message = format!("{message} (and {more} more not ready)");
    }
    PodReadiness::NotReady {
        container,
        reason,
        message: truncate(message),
    }
}

fn not_running(name: &str) -> String {
    format!("container {name} is not running")
}

/// "container web: Readiness probe failed: <output>", kubelet's event text behind the name.
fn probe_message(name: &str, ty: ProbeType, output: Option<String>) -> String {
    match output {
        Some(o) => format!("container {name}: {} probe failed: {o}", ty.name()),
        None => format!(
            "container {name}: {} probe has not succeeded yet",
            ty.name()
        ),
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
