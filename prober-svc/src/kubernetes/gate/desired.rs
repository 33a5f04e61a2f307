//! What the gate wants the condition to say for a pod's readiness, and the write (if any) that
//! brings the API's copy there: kubelet's status manager comparing desired with actual.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::state::{About, GatePod, Planned};
use crate::clock::Clock;
use crate::model::api_pod::{ConditionStatus, GateCondition};
use crate::pods::view::readiness::{PodReadiness, REASON_SPEC_INVALID};

/// A condition the gate wants.
pub(super) struct Wanted {
    status: ConditionStatus,
    reason: &'static str,
    message: String,
    /// The container the message is about ("" for True).
    container: String,
}

/// The condition a readiness asks for; `None`: leave it as it is.
pub(super) fn desired(r: PodReadiness) -> Option<Wanted> {
    match r {
        PodReadiness::Ready => Some(Wanted {
            status: ConditionStatus::True,
            reason: "",
            message: String::new(),
            container: String::new(),
        }),
        PodReadiness::NotReady {
            container,
            reason,
            message,
        } => Some(Wanted {
            status: ConditionStatus::False,
            reason,
            message,
            container,
        }),
        PodReadiness::NotProbed | PodReadiness::Unknown => None,
    }
}

/// Whether the API's condition already says what `want` says: same status and reason, and
/// about the same container. A new probe output alone is no reason to write (a failing exec
/// probe's output may change at every probe; the condition would be rewritten forever). An
/// invalid annotation's message is compared whole: it changes only with the annotation, and
/// then it says what is left to fix.
fn same(c: &GateCondition, about: &About, want: &Wanted) -> bool {
    if want.reason == REASON_SPEC_INVALID {
        return c.status == want.status && c.reason == want.reason && c.message == want.message;
    }
    c.status == want.status
        && c.reason == want.reason
        && (want.container.is_empty() || about.names(c, &want.container))
}

/// The write that brings `pod`'s condition to `want`, if it differs from what the API has.
pub(super) fn plan(uid: &str, pod: &GatePod, want: Wanted, clock: &Clock) -> Option<Planned> {
    if pod
        .current
        .as_ref()
        .is_some_and(|c| same(c, &pod.about, &want))
    {
        return None;
    }
    let last_transition_time = match &pod.current {
        Some(c) if c.status == want.status && !c.last_transition_time.is_empty() => {
            c.last_transition_time.clone()
        }
        _ => rfc3339(clock.now_ns()),
    };
    Some(Planned {
        uid: uid.to_owned(),
        target: pod.target.clone(),
        about: want.container,
        condition: GateCondition {
            status: want.status,
            reason: want.reason.to_owned(),
            message: want.message,
            last_transition_time,
        },
    })
}

/// Unix nanoseconds as the API's `Time` (RFC 3339, whole seconds).
fn rfc3339(ns: i64) -> String {
    let ts = k8s_openapi::jiff::Timestamp::from_second(ns.div_euclid(1_000_000_000))
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    serde_json::to_value(Time(ts))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(message: &str) -> GateCondition {
        GateCondition {
            status: ConditionStatus::False,
            reason: "ReadinessProbeFailed".into(),
            message: message.into(),
            last_transition_time: String::new(),
        }
    }

    #[test]
    fn a_written_condition_is_about_the_container_the_gate_wrote_about() {
        // The record decides, whatever the message says (a message cut at the limit, or one
        // that names another container inside a probe's output).
        let c = condition("container api: Readiness probe failed: container web is down");
        assert!(About::Written("api".into()).names(&c, "api"));
        assert!(!About::Written("api".into()).names(&c, "web"));
        assert!(About::Written("web".into()).names(&condition(""), "web"));
    }

    #[test]
    fn a_condition_found_in_the_api_is_about_the_container_its_message_starts_with() {
        let c = condition("container web: Readiness probe failed: HTTP probe failed");
        assert!(About::Found.names(&c, "web"));
        assert!(!About::Found.names(&c, "we"), "a name, not a prefix of one");
        assert!(About::Found.names(&condition("container web is not running"), "web"));
        assert!(!About::Found.names(&condition(""), "web"));
    }
}
