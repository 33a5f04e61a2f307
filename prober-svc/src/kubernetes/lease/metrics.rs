//! The node lease renewer's metrics (`podward_prober_lease_*`).

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use crate::metrics::MetricsError;

/// The renewer's metrics (`podward_prober_lease_*`).
#[derive(Clone)]
pub struct LeaseMetrics {
    /// Renewals by `result` (`ok`, `conflict`, `error`, `skipped`: not healthy).
    pub renewals: IntCounterVec,
    /// 1 while the prober is healthy enough to renew.
    pub healthy: IntGauge,
    /// Unix seconds of the last successful renewal.
    pub last_renewal: IntGauge,
}

impl LeaseMetrics {
    /// Creates the metrics, registered in `registry` when given.
    pub fn new(registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let m = Self {
            renewals: IntCounterVec::new(
                Opts::new(
                    "podward_prober_lease_renewals_total",
                    "Node lease renewals by result (ok, conflict, error, skipped: the prober cannot vouch for probing; handover: the last renewal at shutdown, for the replacement).",
                ),
                &["result"],
            )?,
            healthy: IntGauge::new(
                "podward_prober_lease_healthy",
                "1 while the prober can vouch for probing on its node (its pod source read; the node's pods listed once since start).",
            )?,
            last_renewal: IntGauge::new(
                "podward_prober_lease_last_renewal_timestamp_seconds",
                "Unix time of the node lease's last successful renewal.",
            )?,
        };
        if let Some(r) = registry {
            r.register(Box::new(m.renewals.clone()))?;
            r.register(Box::new(m.healthy.clone()))?;
            r.register(Box::new(m.last_renewal.clone()))?;
        }
        Ok(m)
    }
}
