//! What the prober tells the world about probes: an [`Event`] describes one thing that happened
//! to one probe of one container, with kubelet's reason and message where kubelet records one,
//! and [`Events`] hands it to every [`EventSink`].
//!
//! Events are built here, next to the sinks, and nowhere else: the manager and the kill path say
//! what happened, the sinks decide what to do with it. The `Watch` hub (`crate::publish::hub`)
//! takes result changes and kill records ([`Event::on_watch`]); the Kubernetes event recorder
//! (`crate::kubernetes::events`) takes what kubelet's recorder would record ([`Event::recorded`]):
//! `Unhealthy` and `ProbeWarning` for single probes, `Killing`, `FailedPreStopHook`, and the events
//! podward records about a pod as a whole (its annotation, [`EventKind::ProbesTakenOver`]).

use std::sync::Arc;

use crate::model::api_pod::{ApiPod, ContainerKind, RestartPolicy};
use crate::model::outcome::Outcome;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo};
use crate::spec::ProbeType;
use crate::stopper::StopError;

/// kubelet's event reason for a container it stops (`events.KillingContainer`).
pub const REASON_KILLING: &str = "Killing";

/// kubelet's event reason for a failed or errored probe (`events.ContainerUnhealthy`).
pub const REASON_UNHEALTHY: &str = "Unhealthy";

/// kubelet's event reason for a probe that succeeded with a warning
/// (`events.ContainerProbeWarning`).
pub const REASON_PROBE_WARNING: &str = "ProbeWarning";

/// podward's event reason for a probe type declared both in the pod spec and in the annotation
/// (kubelet runs the spec's; podward defers).
pub const REASON_PROBE_DECLARED_TWICE: &str = "ProbeDeclaredTwice";

/// podward's event reason for a readiness probe in the annotation of a pod whose
/// `spec.readinessGates` lacks the prober's condition (no Service would follow it).
pub const REASON_READINESS_GATE_MISSING: &str = "ReadinessGateMissing";

/// podward's event reason, and the readiness gate condition's reason, for a `podward.io/probes`
/// annotation the API server would refuse (it does not parse, a probe is invalid, a key is no
/// probe field or no container of the pod): a gated pod stays not ready until it is fixed.
pub const REASON_PROBE_SPEC_INVALID: &str = "ProbeSpecInvalid";

/// kubelet's event reason for a preStop hook that failed (`events.FailedPreStopHook`).
pub const REASON_FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";

/// podward's `Normal` event reason for a pod whose spec probes were moved into
/// `podward.io/probes` (the takeover webhook, `migrate`): podward runs them, kubelet does not.
pub const REASON_PROBES_TAKEN_OVER: &str = "ProbesTakenOver";

/// kubelet's event reason for an HTTPS httpGet hook delivered over HTTP because its server
/// answered in plain HTTP (`runHTTPHandler`).
pub const REASON_LIFECYCLE_HTTP_FALLBACK: &str = "LifecycleHTTPFallback";

/// One thing that happened to one probe of one container, or to the pod as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The container's name; "" for an event about the pod as a whole.
    pub container_name: String,
    /// The container instance's runtime ID.
    pub container_id: String,
    /// The container is declared in `spec.initContainers` (a sidecar), as far as the prober
    /// knows the pod spec: Kubernetes events name it `spec.initContainers{name}`.
    pub init_container: bool,
    /// The probe concerned (of an event about several, the first it names).
    pub probe: ProbeType,
    /// When it happened, Unix ns.
    pub at_ns: i64,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The published result changed (kubelet's results-manager update).
    Result {
        /// The new result.
        result: ProbeResult,
        /// The output of the probe that changed it (capped), "" for initial values.
        output: String,
    },
    /// The container was stopped after its liveness or startup probe failed at threshold.
    Kill(Kill),
    /// One probe run that kubelet reports with an event of its own (a failure, an error, a
    /// warning), whether or not it changed the result; never a plain success.
    Probed(Outcome),
    /// A kill begins: kubelet records `Killing` before the preStop hook and the stop.
    Killing {
        /// kubelet's message ("Container web failed liveness probe, will be restarted").
        message: String,
    },
    /// The container's preStop hook failed (the stop went ahead).
    PreStopFailed,
    /// The container's HTTPS preStop hook was delivered over HTTP: its server answered the TLS
    /// handshake in plain HTTP. An event about the pod (kubelet names no container).
    LifecycleHttpFallback {
        /// The request URL's `host:port`.
        host: String,
    },
    /// The `podward.io/probes` annotation asks for something podward does not do as written
    /// (a probe type the pod spec declares too, a readiness probe without the readiness gate).
    AnnotationWarning {
        /// The event's reason ([`REASON_PROBE_DECLARED_TWICE`], [`REASON_READINESS_GATE_MISSING`],
        /// [`REASON_PROBE_SPEC_INVALID`]).
        reason: &'static str,
        /// What a user reads.
        message: String,
    },
    /// The pod's spec probes were moved into `podward.io/probes` (`podward.io/probes-moved`
    /// records which): podward runs them, not kubelet. An event about the pod as a whole, once
    /// per pod ([`crate::pods::manager`] decides when).
    ProbesTakenOver(Vec<MovedProbes>),
}

/// The probes moved out of one container's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedProbes {
    /// The container's name.
    pub container: String,
    /// The probe types moved, in the spec's field order.
    pub probes: Vec<ProbeType>,
}

/// What kubelet's event recorder would record for an [`Event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The event's reason (`Unhealthy`...).
    pub reason: &'static str,
    /// kubelet's message text.
    pub message: String,
}

/// One probe-triggered stop of a container, as `Status` and `Watch` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// The container instance stopped.
    pub container_id: String,
    /// The probe that failed.
    pub probe: ProbeType,
    /// kubelet's message ([`killing_message_for`]).
    pub message: String,
    /// The failing probe's output (capped).
    pub output: String,
    /// Grace period given to `StopContainer`, seconds.
    pub grace_seconds: i64,
    /// When the stop was issued, Unix ns.
    pub issued_at_ns: i64,
    /// Why `StopContainer` failed, if it did.
    pub error: Option<StopError>,
}

// === impl Event ===

impl Event {
    /// The result of `ty` for container `c` of `pod` changed to `result`.
    pub fn result(
        pod: &PodInfo,
        c: &ContainerInfo,
        ty: ProbeType,
        result: ProbeResult,
        output: String,
        at_ns: i64,
    ) -> Self {
        Self::about(pod, c, ty, at_ns, EventKind::Result { result, output })
    }

    /// Container `c` of `pod` was stopped (`kill.issued_at_ns` is the event's time).
    pub fn kill(pod: &PodInfo, c: &ContainerInfo, kill: Kill) -> Self {
        Self::about(pod, c, kill.probe, kill.issued_at_ns, EventKind::Kill(kill))
    }

    /// One `ty` probe of container `c` of `pod` ran with an outcome kubelet records.
    pub fn probed(
        pod: &PodInfo,
        c: &ContainerInfo,
        ty: ProbeType,
        probed: Outcome,
        at_ns: i64,
    ) -> Self {
        Self::about(pod, c, ty, at_ns, EventKind::Probed(probed))
    }

    /// The kill of container `c` of `pod` (for its `ty` probe) begins.
    pub fn killing(pod: &PodInfo, c: &ContainerInfo, ty: ProbeType, at_ns: i64) -> Self {
        let message = killing_message_for(pod, &c.name, ty);
        Self::about(pod, c, ty, at_ns, EventKind::Killing { message })
    }

    /// The preStop hook of container `c` of `pod` failed during a kill for its `ty` probe.
    pub fn pre_stop_failed(pod: &PodInfo, c: &ContainerInfo, ty: ProbeType, at_ns: i64) -> Self {
        Self::about(pod, c, ty, at_ns, EventKind::PreStopFailed)
    }

    /// The `ProbesTakenOver` event of pod `api`: the probes `podward.io/probes-moved` records as
    /// moved, per container of the pod; `None` when it records none.
    pub fn probes_taken_over(api: &ApiPod, at_ns: i64) -> Option<Self> {
        let moved: Vec<MovedProbes> = api
            .containers
            .iter()
            .filter(|c| !c.moved_probes.is_empty())
            .map(|c| MovedProbes {
                container: c.name.clone(),
                probes: c.moved_probes.clone(),
            })
            .collect();
        let probe = *moved.first()?.probes.first()?;
        Some(Self {
            pod_uid: api.uid.clone(),
            pod_name: api.name.clone(),
            pod_namespace: api.namespace.clone(),
            container_name: String::new(),
            container_id: String::new(),
            init_container: false,
            probe,
            at_ns,
            kind: EventKind::ProbesTakenOver(moved),
        })
    }

    /// The HTTPS preStop hook of container `c` of `pod` (run for a kill for its `ty` probe) was
    /// delivered over HTTP to `host`; recorded on the pod, as kubelet records it.
    pub fn lifecycle_http_fallback(
        pod: &PodInfo,
        c: &ContainerInfo,
        ty: ProbeType,
        host: String,
        at_ns: i64,
    ) -> Self {
        Self {
            container_name: String::new(),
            ..Self::about(pod, c, ty, at_ns, EventKind::LifecycleHttpFallback { host })
        }
    }

    fn about(pod: &PodInfo, c: &ContainerInfo, ty: ProbeType, at_ns: i64, kind: EventKind) -> Self {
        let init_container = pod
            .api
            .as_ref()
            .and_then(|a| a.container(&c.name))
            .is_some_and(|a| a.kind != ContainerKind::Regular);
        Self {
            pod_uid: pod.uid.clone(),
            pod_name: pod.name.clone(),
            pod_namespace: pod.namespace.clone(),
            container_name: c.name.clone(),
            container_id: c.id.to_string(),
            init_container,
            probe: ty,
            at_ns,
            kind,
        }
    }

    /// Whether the `Watch` API carries this event: result changes and kill records (what
    /// kubelet keeps in the pod status), not the per-probe notes kubelet records as events.
    pub fn on_watch(&self) -> bool {
        matches!(self.kind, EventKind::Result { .. } | EventKind::Kill(_))
    }

    /// What kubelet's event recorder records for this, with kubelet's type, reason and message
    /// (`prober.go` for single probes, `killContainer` in `kuberuntime_container.go` for kills
    /// and hooks); `None` for result changes and kill records, which kubelet keeps in the pod
    /// status instead.
    pub fn recorded(&self) -> Option<Recorded> {
        let probe = self.probe.name();
        let (warning, reason, message) = match &self.kind {
            EventKind::Result { .. }
            | EventKind::Kill(_)
            | EventKind::Probed(Outcome::Success(_)) => return None,
            EventKind::Probed(Outcome::Failure(output)) => (
                true,
                REASON_UNHEALTHY,
                format!("{probe} probe failed: {output}"),
            ),
            EventKind::Probed(Outcome::Errored(error)) => (
                true,
                REASON_UNHEALTHY,
                format!("{probe} probe errored and resulted in unknown state: {error}"),
            ),
            EventKind::Probed(Outcome::Warning(output)) => (
                true,
                REASON_PROBE_WARNING,
                format!("{probe} probe warning: {output}"),
            ),
            EventKind::Killing { message } => (false, REASON_KILLING, message.clone()),
            EventKind::AnnotationWarning { reason, message } => (true, *reason, message.clone()),
            EventKind::ProbesTakenOver(moved) => {
                (false, REASON_PROBES_TAKEN_OVER, taken_over_message(moved))
            }
            // kubelet leaves the hook's output out of the event so that secrets cannot leak.
            EventKind::PreStopFailed => (
                true,
                REASON_FAILED_PRE_STOP_HOOK,
                "PreStopHook failed".to_owned(),
            ),
            EventKind::LifecycleHttpFallback { host } => (
                true,
                REASON_LIFECYCLE_HTTP_FALLBACK,
                format!(
                    "request to HTTPS lifecycle hook {host} got HTTP response, retry with HTTP succeeded"
                ),
            ),
        };
        Some(Recorded {
            warning,
            reason,
            message,
        })
    }

    /// The probe output this event carries.
    pub fn output(&self) -> &str {
        match &self.kind {
            EventKind::Result { output, .. } => output,
            EventKind::Kill(k) => &k.output,
            EventKind::Probed(outcome) => outcome.output(),
            EventKind::Killing { .. }
            | EventKind::PreStopFailed
            | EventKind::LifecycleHttpFallback { .. }
            | EventKind::AnnotationWarning { .. }
            | EventKind::ProbesTakenOver(_) => "",
        }
    }
}

/// The `ProbesTakenOver` message: where the probes went and who runs them, then what moved per
/// container ("container app: livenessProbe, readinessProbe; container proxy: ...").
fn taken_over_message(moved: &[MovedProbes]) -> String {
    let list: Vec<String> = moved
        .iter()
        .map(|m| {
            let fields: Vec<&str> = m.probes.iter().map(|t| t.field_name()).collect();
            format!("container {}: {}", m.container, fields.join(", "))
        })
        .collect();
    format!(
        "Probes taken over by podward (moved from the pod spec into podward.io/probes; kubelet does not run them): {}",
        list.join("; ")
    )
}

/// kubelet's message when it stops a regular container of a pod that restarts it
/// (`computePodActions` in `kuberuntime_manager.go`: "Container %s failed %s probe, will be
/// restarted").
pub fn killing_message(container: &str, ty: ProbeType) -> String {
    format!(
        "Container {container} failed {} probe, will be restarted",
        probe_word(ty)
    )
}

/// kubelet's message when it stops container `name` of `pod` for a failed `ty` probe, so that
/// the text says what follows a stop by podward (kubelet's `ShouldContainerBeRestarted` on the
/// exited container):
/// - a sidecar: "Init container X failed liveness probe" (`computeInitContainerActions`; it is
///   restarted whatever its exit code);
/// - a regular container under `Always`: "Container X failed liveness probe, will be
///   restarted";
/// - under `OnFailure`: kubelet restarts an exited container only if its exit code is not 0, and
///   a container that handles SIGTERM may well exit 0: "..., will be restarted if it exits
///   non-zero" (kubelet's own kill restarts it in the same sync whatever the code; a stop
///   through CRI cannot do that, nor choose the exit code);
/// - under `Never`, with another regular container still running: "Container X failed liveness
///   probe"; with none ([`kills_pod`]): kubelet kills the whole pod, its text is "Stopping
///   container X" (`killContainer` with no message).
///
/// Without the API's view of the pod: the API's default policy (`Always`) and a regular
/// container.
pub fn killing_message_for(pod: &PodInfo, name: &str, ty: ProbeType) -> String {
    let probe = probe_word(ty);
    let api = pod.api.as_deref();
    if api
        .and_then(|a| a.container(name))
        .is_some_and(|c| c.kind == ContainerKind::Sidecar)
    {
        return format!("Init container {name} failed {probe} probe");
    }
    if kills_pod(pod, name) {
        return format!("Stopping container {name}");
    }
    match api.map(|a| a.restart_policy) {
        Some(RestartPolicy::Never) => format!("Container {name} failed {probe} probe"),
        Some(RestartPolicy::OnFailure) => {
            format!("Container {name} failed {probe} probe, will be restarted if it exits non-zero")
        }
        _ => killing_message(name, ty),
    }
}

/// Whether kubelet, failing the probe of regular container `name` of `pod` itself, would kill
/// the whole pod (`computePodActions`: `restartPolicy: Never` and no other regular container to
/// keep running). kubelet then stops it with the pod's grace (`killPodWithSyncResult`, no
/// probe reason, so no probe-level `terminationGracePeriodSeconds`) and the text "Stopping
/// container X".
pub fn kills_pod(pod: &PodInfo, name: &str) -> bool {
    let Some(api) = pod.api.as_deref() else {
        return false;
    };
    if api.restart_policy != RestartPolicy::Never
        || api
            .container(name)
            .is_some_and(|c| c.kind != ContainerKind::Regular)
    {
        return false;
    }
    !api.containers.iter().any(|c| {
        c.kind == ContainerKind::Regular
            && c.name != name
            && pod
                .current(&c.name)
                .is_some_and(|i| i.state == crate::model::RunState::Running)
    })
}

fn probe_word(ty: ProbeType) -> &'static str {
    match ty {
        ProbeType::Startup => "startup",
        _ => "liveness",
    }
}

// === Events ===

/// Where events go. Publishing must not block: sinks queue or drop, never wait.
pub trait EventSink: Send + Sync + 'static {
    /// Takes one event.
    fn publish(&self, event: &Event);
}

/// Every sink, in order. Cheap to clone.
#[derive(Clone, Default)]
pub struct Events {
    sinks: Arc<[Arc<dyn EventSink>]>,
}

impl Events {
    /// Events delivered to `sinks`.
    pub fn new(sinks: Vec<Arc<dyn EventSink>>) -> Self {
        Self {
            sinks: sinks.into(),
        }
    }

    /// Hands `event` to every sink.
    pub fn publish(&self, event: Event) {
        for sink in self.sinks.iter() {
            sink.publish(&event);
        }
    }
}

#[cfg(test)]
mod tests;
