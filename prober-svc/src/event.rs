//! What the prober tells the world about probes: an [`Event`] describes one thing that happened
//! to one probe of one container, with kubelet's reason and message where kubelet records one,
//! and [`Events`] hands it to every [`EventSink`].
//!
//! Events are built here, next to the sinks, and nowhere else: the manager and the kill path say
//! what happened, the sinks decide what to do with it. Today the one sink is the `Watch` hub
//! (`crate::hub`); a Kubernetes event recorder (kubelet's `Killing`, `Unhealthy`, `ProbeWarning`)
//! is another sink of the same events.

use std::sync::Arc;

use crate::model::{ContainerInfo, PodInfo};
use crate::results::ProbeResult;
use crate::spec::ProbeType;
use crate::stopper::StopError;

/// kubelet's event reason for a container it stops (`events.KillingContainer`).
pub const REASON_KILLING: &str = "Killing";

/// One thing that happened to one probe of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The container's name.
    pub container_name: String,
    /// The container instance's runtime ID.
    pub container_id: String,
    /// The probe concerned.
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
}

/// One probe-triggered stop of a container, as `Status` and `Watch` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// The container instance stopped.
    pub container_id: String,
    /// The probe that failed.
    pub probe: ProbeType,
    /// kubelet's message ("Container web failed liveness probe, will be restarted").
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

    fn about(pod: &PodInfo, c: &ContainerInfo, ty: ProbeType, at_ns: i64, kind: EventKind) -> Self {
        Self {
            pod_uid: pod.uid.clone(),
            pod_name: pod.name.clone(),
            pod_namespace: pod.namespace.clone(),
            container_name: c.name.clone(),
            container_id: c.id.to_string(),
            probe: ty,
            at_ns,
            kind,
        }
    }

    /// kubelet's event reason, where kubelet records an event for this (`None` for result
    /// changes, which kubelet keeps in the pod status instead).
    pub fn reason(&self) -> Option<&'static str> {
        match self.kind {
            EventKind::Result { .. } => None,
            EventKind::Kill(_) => Some(REASON_KILLING),
        }
    }

    /// kubelet's message for the event, where [`Event::reason`] names one.
    pub fn message(&self) -> Option<&str> {
        match &self.kind {
            EventKind::Result { .. } => None,
            EventKind::Kill(k) => Some(&k.message),
        }
    }

    /// The probe output this event carries.
    pub fn output(&self) -> &str {
        match &self.kind {
            EventKind::Result { output, .. } => output,
            EventKind::Kill(k) => &k.output,
        }
    }
}

/// kubelet's message when it stops a container for a failed probe (`computePodActions` in
/// `kuberuntime_manager.go`: "Container %s failed %s probe, will be restarted").
pub fn killing_message(container: &str, ty: ProbeType) -> String {
    let probe = match ty {
        ProbeType::Startup => "startup",
        _ => "liveness",
    };
    format!("Container {container} failed {probe} probe, will be restarted")
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
mod tests {
    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            pod_uid: "u".into(),
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            container_name: "web".into(),
            container_id: "c1".into(),
            probe: ProbeType::Liveness,
            at_ns: 1,
            kind,
        }
    }

    #[test]
    fn kills_carry_kubelets_reason_and_message_and_results_none() {
        assert_eq!(
            killing_message("web", ProbeType::Liveness),
            "Container web failed liveness probe, will be restarted"
        );
        assert_eq!(
            killing_message("web", ProbeType::Startup),
            "Container web failed startup probe, will be restarted"
        );
        let kill = event(EventKind::Kill(Kill {
            container_id: "c1".into(),
            probe: ProbeType::Liveness,
            message: killing_message("web", ProbeType::Liveness),
            output: "HTTP probe failed with statuscode: 500".into(),
            grace_seconds: 30,
            issued_at_ns: 1,
            error: None,
        }));
        assert_eq!(kill.reason(), Some("Killing"));
        assert_eq!(
            kill.message(),
            Some("Container web failed liveness probe, will be restarted")
        );
        assert_eq!(kill.output(), "HTTP probe failed with statuscode: 500");
        let result = event(EventKind::Result {
            result: ProbeResult::Failure,
            output: "refused".into(),
        });
        assert_eq!((result.reason(), result.message()), (None, None));
        assert_eq!(result.output(), "refused");
    }
}
