//! What the gate does with a write's outcome: the condition recorded as the API's, or the pod's
//! retry scheduled on its backoff (a throttled write waits what the server asked).

use tokio::time::Instant;

use super::state::{About, State};
use super::write::WriteError;
use crate::kubernetes::metrics::ApiMetrics;
use crate::model::api_pod::GateCondition;

/// Write outcome: what was written, or why not.
pub(super) type Outcome = Result<Written, WriteError>;

/// A condition the API server took.
pub(super) struct Written {
    /// The condition written.
    pub(super) condition: GateCondition,
    /// The container it is about ("" for a pod-wide one).
    pub(super) about: String,
    /// The pod's resource version after the write.
    pub(super) resource_version: String,
}

/// What follows a write's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterWrite {
    /// Nothing: the condition is written, or this write is not to be tried again (the pod is
    /// gone, or the server refuses it as invalid) until the pod's readiness changes.
    Settled,
    /// Look at the pod again once its backoff has passed.
    Retry,
}

/// Records in `st` the outcome of a write of a `condition_type` condition to pod `uid`: what
/// was written, or why not; a write to retry queues the pod again.
pub(super) fn record(
    st: &mut State,
    m: &ApiMetrics,
    condition_type: &str,
    uid: &str,
    result: Outcome,
) {
    st.in_flight.remove(uid);
    let Some(pod) = st.pods.get_mut(uid) else {
        return;
    };
    let after = match result {
        Ok(Written {
            condition,
            about,
            resource_version,
        }) => {
            m.gate_writes.with_label_values(&["ok"]).inc();
            tracing::info!(pod = %pod.target.name, namespace = %pod.target.namespace,
                    condition = %condition_type, status = condition.status.as_str(),
                    reason = %condition.reason, "readiness gate written");
            pod.current = Some(condition);
            pod.about = About::Written(about);
            pod.written_rv = resource_version.parse().ok();
            if pod.failures > 0 {
                m.gate_failing.dec();
            }
            pod.failures = 0;
            pod.backoff.reset();
            pod.not_before = None;
            AfterWrite::Settled
        }
        Err(WriteError::Gone) => {
            m.gate_writes.with_label_values(&["gone"]).inc();
            if pod.failures > 0 {
                m.gate_failing.dec();
            }
            pod.failures = 0;
            pod.backoff.reset();
            AfterWrite::Settled
        }
        Err(WriteError::Invalid(message)) => {
            m.gate_writes.with_label_values(&["invalid"]).inc();
            tracing::warn!(pod = %pod.target.name, namespace = %pod.target.namespace,
                    error = %message,
                    "the API server refuses the readiness-gate condition as invalid; not retried until the readiness changes");
            if pod.failures > 0 {
                m.gate_failing.dec();
            }
            pod.failures = 0;
            pod.backoff.reset();
            AfterWrite::Settled
        }
        Err(e) => {
            let label = match &e {
                WriteError::Conflict(_) => "conflict",
                WriteError::Throttled(_) => "throttled",
                _ => "error",
            };
            m.gate_writes.with_label_values(&[label]).inc();
            if pod.failures == 0 {
                m.gate_failing.inc();
            }
            pod.failures = pod.failures.saturating_add(1);
            // The schedule moves on either way: throttling is a failure in a row too.
            let next = pod.backoff.next_delay();
            let delay = match &e {
                WriteError::Throttled(Some(d)) => *d,
                _ => next,
            };
            let log = pod.failures == 1;
            if log {
                tracing::warn!(pod = %pod.target.name, namespace = %pod.target.namespace,
                        error = %e, retry_in_ms = delay.as_millis() as u64,
                        "cannot write the readiness-gate condition; retrying");
            } else {
                tracing::debug!(pod = %pod.target.name, error = %e, failures = pod.failures,
                        "readiness-gate write failed again");
            }
            pod.not_before = Some(Instant::now() + delay);
            AfterWrite::Retry
        }
    };
    if after == AfterWrite::Retry {
        st.mark(uid);
    }
}
