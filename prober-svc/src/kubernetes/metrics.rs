//! The prober's Kubernetes API metrics (`podward_prober_api_*`, `podward_prober_gate_*`).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::metrics::MetricsError;

/// What the API side counts.
#[derive(Clone)]
pub struct ApiMetrics {
    /// 1 once the pod reflector listed the node's pods (kept while a dropped watch resumes).
    pub synced: IntGauge,
    /// Failures of the pod watch (each resumed by kube-rs, or relisted after a `410`).
    pub watch_errors: IntCounter,
    /// Unix seconds of the pod watch's last failure.
    pub watch_last_error: IntGauge,
    /// Pods whose last readiness-gate write failed (retried with backoff).
    pub gate_failing: IntGauge,
    /// Pods of the node in the reflector's view.
    pub pods: IntGauge,
    /// Readiness-gate condition writes by `result`.
    pub gate_writes: IntCounterVec,
    /// Pods whose condition waits to be written (changed, in backoff, or throttled).
    pub gate_pending: IntGauge,
    /// Kubernetes events by `result` (`sent`, `failed`, `dropped`, `filtered`).
    pub events: IntCounterVec,
}

impl ApiMetrics {
    /// Creates the metrics and registers them in `registry` (`None`: unregistered, for tests).
    pub fn new(registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let m = Self {
            synced: IntGauge::new(
                "podward_prober_api_synced",
                "1 once the prober has listed its node's pods from the Kubernetes API (a resumed watch keeps it).",
            )?,
            watch_errors: IntCounter::new(
                "podward_prober_api_watch_errors_total",
                "Failures of the watch of the node's pods (each resumed or relisted; probing goes on).",
            )?,
            watch_last_error: IntGauge::new(
                "podward_prober_api_watch_last_error_timestamp_seconds",
                "Unix time of the pod watch's last failure.",
            )?,
            gate_failing: IntGauge::new(
                "podward_prober_gate_failing_pods",
                "Pods whose last readiness-gate write failed and is being retried (a refused pod stays here; the node lease is not withdrawn for it).",
            )?,
            pods: IntGauge::new(
                "podward_prober_api_pods",
                "Pods of this node in the prober's view of the Kubernetes API.",
            )?,
            gate_writes: IntCounterVec::new(
                Opts::new(
                    "podward_prober_gate_writes_total",
                    "Writes of the readiness-gate pod condition, by result (ok, conflict, throttled, gone, invalid, error).",
                ),
                &["result"],
            )?,
            gate_pending: IntGauge::new(
                "podward_prober_gate_pending",
                "Pods whose readiness-gate condition waits to be written.",
            )?,
            events: IntCounterVec::new(
                Opts::new(
                    "podward_prober_api_events_total",
                    "Kubernetes events by result (sent, failed, dropped: queue full, filtered: per-object spam filter).",
                ),
                &["result"],
            )?,
        };
        if let Some(r) = registry {
            r.register(Box::new(m.synced.clone()))?;
            r.register(Box::new(m.watch_errors.clone()))?;
            r.register(Box::new(m.watch_last_error.clone()))?;
            r.register(Box::new(m.gate_failing.clone()))?;
            r.register(Box::new(m.pods.clone()))?;
            r.register(Box::new(m.gate_writes.clone()))?;
            r.register(Box::new(m.gate_pending.clone()))?;
            r.register(Box::new(m.events.clone()))?;
        }
        Ok(m)
    }
}
