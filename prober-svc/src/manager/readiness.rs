//! A pod's readiness as the readiness gate sees it: every container with a podward readiness
//! probe ready, every container with a podward startup probe started.
//!
//! Unlike `Status` (kubelet's `UpdatePodStatus`, which calls a container that ran before this
//! prober "ready" until a verdict), this never guesses: a container whose readiness this prober
//! has not yet established is [`PodReadiness::Unknown`], and the gate then keeps the condition
//! the API has. That is what makes a prober restart invisible to Services in both directions
//! (docs/prober.md, "The readiness gate").

use std::collections::BTreeSet;

use super::Manager;
use crate::model::api::PodPhase;
use crate::results::ProbeResult;
use crate::spec::ProbeType;
use crate::worker::handle::WorkerKey;
use crate::worker::started_before_restart;

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
/// Condition reason: the container does not run.
pub const REASON_NOT_RUNNING: &str = "ContainerNotRunning";
/// Condition reason of a pod whose phase is `Succeeded` (kubelet's `PodCompleted`, the reason of
/// its `ContainersReady` and `Ready` conditions then).
pub const REASON_POD_COMPLETED: &str = "PodCompleted";
/// Condition reason of a pod whose phase is `Failed` (kubelet's `PodFailed`).
pub const REASON_POD_FAILED: &str = "PodFailed";

/// One container's state for the gate.
enum Verdict {
    Ready,
    Unknown,
    NotReady(&'static str, String),
}

impl Manager {
    /// Pod `uid`'s readiness for the readiness gate.
    ///
    /// The gate's rules (docs/prober.md, "The readiness gate"): a finished pod is not ready,
    /// with kubelet's reason; a pod whose API view has no `podward.io/probes` annotation (never
    /// had one, or it was removed) is ready, as kubelet treats a container without a readiness
    /// probe; a container whose probe workers ended (it exited and will not restart) is judged
    /// by its state, never left out.
    pub fn readiness(&self, uid: &str) -> PodReadiness {
        let api = self.state.api.lock().get(uid).cloned();
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
        let entry = self.state.pods.lock().get(uid).map(|e| {
            // Names whose readiness or startup the annotation asks for, workers or not.
            let gated: Vec<String> = e
                .probes
                .iter()
                .filter(|(n, p)| {
                    (p.readiness.is_some() || p.startup.is_some()) && !e.unknown.names.contains(*n)
                })
                .map(|(n, _)| n.clone())
                .collect();
            (e.shared.clone(), gated)
        });
        let Some((shared, gated)) = entry else {
            return match api {
                Some(a) if a.probes_annotation.is_none() => PodReadiness::Ready,
                _ => PodReadiness::NotProbed,
            };
        };
        let pod = shared.read().clone();
        let results = &self.ctx.results;
        let mut verdicts = Vec::new();
        {
            let workers = self.state.workers.lock();
            let first = WorkerKey {
                pod_uid: uid.to_owned(),
                container: String::new(),
                ty: ProbeType::Liveness,
            };
            let names: BTreeSet<&str> = workers
                .range(first..)
                .take_while(|(k, _)| k.pod_uid == uid)
                .filter(|(k, _)| k.ty != ProbeType::Liveness)
                .map(|(k, _)| k.container.as_str())
                .chain(gated.iter().map(String::as_str))
                .collect();
            for name in names {
                let get = |ty| {
                    workers.get(&WorkerKey {
                        pod_uid: uid.to_owned(),
                        container: name.to_owned(),
                        ty,
                    })
                };
                let (startup, readiness) = (get(ProbeType::Startup), get(ProbeType::Readiness));
                let Some(c) = pod.current(name) else {
                    verdicts.push((name.to_owned(), Verdict::Unknown));
                    continue;
                };
                let result = |ty| results.get(&c.id, ty);
                let output = |w: Option<&super::WorkerEntry>| {
                    w.and_then(|w| {
                        let st = w.status.lock();
                        (st.last_probe_result == Some(ProbeResult::Failure))
                            .then(|| st.last_output.clone())
                    })
                };
                // A container that was running before this prober started, and whose probes
                // have not reached a verdict (a threshold) under this prober: its initial
                // value (kubelet's, for a container within the restart grace) is no result;
                // the API's condition stands.
                let unprobed = |w: Option<&super::WorkerEntry>| {
                    c.state == crate::model::RunState::Running
                        && c.started_at_ns > 0
                        && c.started_at_ns < self.state.clock.start_ns()
                        && w.is_some_and(|w| !w.status.lock().verdict)
                };
                let verdict = if startup.is_some() {
                    match result(ProbeType::Startup) {
                        Some(ProbeResult::Success) => None,
                        // Started under a previous prober: kubelet keeps such a container
                        // started, and its readiness (if any) decides below.
                        None if started_before_restart(c, &self.state.clock) => None,
                        None => Some(Verdict::Unknown),
                        Some(_) if c.state != crate::model::RunState::Running => {
                            Some(Verdict::NotReady(REASON_NOT_RUNNING, not_running(name)))
                        }
                        Some(_) if unprobed(startup) => Some(Verdict::Unknown),
                        Some(_) => Some(Verdict::NotReady(
                            REASON_STARTUP,
                            probe_message(name, ProbeType::Startup, output(startup)),
                        )),
                    }
                } else {
                    None
                };
                let verdict = verdict.unwrap_or_else(|| match readiness {
                    None => {
                        // No readiness probe: ready once started (and running).
                        if c.state == crate::model::RunState::Running {
                            Verdict::Ready
                        } else {
                            Verdict::NotReady(REASON_NOT_RUNNING, not_running(name))
                        }
                    }
                    Some(_) => match result(ProbeType::Readiness) {
                        None => Verdict::Unknown,
                        Some(ProbeResult::Success)
                            if c.state == crate::model::RunState::Running =>
                        {
                            Verdict::Ready
                        }
                        Some(_) if c.state != crate::model::RunState::Running => {
                            Verdict::NotReady(REASON_NOT_RUNNING, not_running(name))
                        }
                        Some(_) if unprobed(readiness) => Verdict::Unknown,
                        Some(_) => Verdict::NotReady(
                            REASON_READINESS,
                            probe_message(name, ProbeType::Readiness, output(readiness)),
                        ),
                    },
                });
                verdicts.push((name.to_owned(), verdict));
            }
        }
        combine(verdicts)
    }
}

fn combine(verdicts: Vec<(String, Verdict)>) -> PodReadiness {
    let mut unknown = false;
    let mut failing: Vec<(String, &'static str, String)> = Vec::new();
    for (name, v) in verdicts {
        match v {
            Verdict::Ready => {}
            Verdict::Unknown => unknown = true,
            Verdict::NotReady(reason, message) => failing.push((name, reason, message)),
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
