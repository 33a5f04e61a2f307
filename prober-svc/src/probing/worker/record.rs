//! What a worker records of each probe for `Status` (its [`super::handle::WorkerStatus`]):
//! counters, the last output, and the last error of a probe that errored.

use super::state::Worker;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo};

impl Worker {
    /// An errored probe (kubelet: "probe errored and resulted in unknown state"): discarded for
    /// the counters, but visible — `Status.last_error`, `podward_prober_probe_errors_total`, the
    /// event, and a log line.
    ///
    /// The log line is a warning once a second probe in a row errors, and again each time the
    /// error changes while probes keep erroring; a single errored probe is logged at debug. A
    /// probe that meets its container's end (an exec racing the kill or exit the worker has not
    /// seen yet: containerd answers that the task is not found) errors once and the next probe
    /// sees the new instance; kubelet meets the same race and logs probe errors at its verbose
    /// level. An error that lasts is what an operator should see.
    pub(super) fn errored(&self, pod: &PodInfo, c: &ContainerInfo, message: String) {
        self.ctx
            .metrics
            .probe_errors
            .with_label_values(&[self.key.ty.name()])
            .inc();
        self.status.update(|st| {
            st.probes_errored += 1;
            st.last_error_at_ns = self.ctx.clock.now_ns();
            st.consecutive_errors = st.consecutive_errors.saturating_add(1);
            let changed = st.last_error != message;
            if st.consecutive_errors == 2 || (st.consecutive_errors > 2 && changed) {
                tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                    container_id = %c.id, probe = self.key.ty.name(), error = %message,
                    errored_in_a_row = st.consecutive_errors,
                    "probe errored and resulted in unknown state; result discarded (logged again \
                     when the error changes)");
            } else if st.consecutive_errors == 1 {
                tracing::debug!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                    container_id = %c.id, probe = self.key.ty.name(), error = %message,
                    "probe errored and resulted in unknown state; result discarded (a warning if \
                     the next probe errors too)");
            }
            if changed {
                st.last_error = message;
            }
        });
    }

    pub(super) fn record(&self, result: ProbeResult, output: &str) {
        self.status.update(|st| {
            if !st.last_error.is_empty() {
                // Said only after the warning the errors gave.
                if st.consecutive_errors >= 2 {
                    tracing::info!(container_id = %st.container_id, probe = self.key.ty.name(),
                        "probe answers again after erroring");
                }
                st.last_error.clear();
            }
            st.consecutive_errors = 0;
            st.last_probe_result = Some(result);
            // Steady probes repeat their output: keep the old copy rather than allocate per probe.
            if st.last_output != output {
                st.last_output = output.to_owned();
            }
            st.last_probe_at_ns = self.ctx.clock.now_ns();
            st.probes_run += 1;
            match result {
                ProbeResult::Success => {
                    st.consecutive_successes = self.result_run;
                    st.consecutive_failures = 0;
                }
                _ => {
                    st.consecutive_failures = self.result_run;
                    st.consecutive_successes = 0;
                }
            }
        });
    }
}
