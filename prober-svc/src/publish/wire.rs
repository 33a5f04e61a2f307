//! The prober's types on the wire (`podward.prober.v1`): one conversion per type, used by
//! `Status` and by the `Watch` hub.

use podward_api::prober::v1 as api;

use crate::model::outcome::ProbeResult;
use crate::publish::event::{Event, EventKind, Kill};
use crate::spec::ProbeType;

/// A probe type on the wire.
pub fn probe_type(ty: ProbeType) -> api::ProbeType {
    match ty {
        ProbeType::Liveness => api::ProbeType::Liveness,
        ProbeType::Readiness => api::ProbeType::Readiness,
        ProbeType::Startup => api::ProbeType::Startup,
    }
}

/// A result on the wire (none yet is Unknown).
pub fn probe_result(r: Option<ProbeResult>) -> api::ProbeResult {
    match r {
        Some(ProbeResult::Success) => api::ProbeResult::Success,
        Some(ProbeResult::Failure) => api::ProbeResult::Failure,
        Some(ProbeResult::Unknown) | None => api::ProbeResult::Unknown,
    }
}

/// A kill on the wire (its message is the wire's `reason`; no error is "").
pub fn kill(k: &Kill) -> api::Kill {
    api::Kill {
        container_id: k.container_id.clone(),
        probe_type: probe_type(k.probe) as i32,
        reason: k.message.clone(),
        output: k.output.clone(),
        grace_period_seconds: k.grace_seconds,
        at_ns: k.issued_at_ns,
        error: k
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    }
}

/// An event on the wire, without its sequence number (the hub sets it); `None` for what `Watch`
/// does not carry ([`Event::on_watch`]).
pub fn event(ev: &Event) -> Option<api::ProbeEvent> {
    let event = match &ev.kind {
        EventKind::Result { result, .. } => {
            api::probe_event::Event::Result(probe_result(Some(*result)) as i32)
        }
        EventKind::Kill(k) => api::probe_event::Event::Kill(kill(k)),
        EventKind::Probed(_)
        | EventKind::Killing { .. }
        | EventKind::PreStopFailed
        | EventKind::LifecycleHttpFallback { .. }
        | EventKind::AnnotationWarning { .. }
        | EventKind::ProbesTakenOver(_) => return None,
    };
    Some(api::ProbeEvent {
        pod_uid: ev.pod_uid.clone(),
        pod_name: ev.pod_name.clone(),
        pod_namespace: ev.pod_namespace.clone(),
        container_name: ev.container_name.clone(),
        container_id: ev.container_id.clone(),
        probe_type: probe_type(ev.probe) as i32,
        at_ns: ev.at_ns,
        output: ev.output().to_owned(),
        event: Some(event),
        ..Default::default()
    })
}
