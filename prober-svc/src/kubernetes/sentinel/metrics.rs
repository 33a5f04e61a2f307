//! The sentinel's metrics (`podward_sentinel_*`).

use prometheus::{IntCounter, IntGauge, Registry};

use crate::metrics::MetricsError;

/// What the sentinel counts.
#[derive(Clone)]
pub struct SentinelMetrics {
    /// 1 while this replica leads.
    pub leader: IntGauge,
    /// Node leases seen.
    pub leases: IntGauge,
    /// Of them expired.
    pub expired: IntGauge,
    /// Expired nodes not handed out: held, or waiting for a retry.
    pub waiting: IntGauge,
    /// Expired nodes held: their zone is disrupted, or every lease expired.
    pub held: IntGauge,
    /// Nodes whose lease expired (transitions).
    pub expirations: IntCounter,
    /// Pods whose condition was written `False`.
    pub pods_marked: IntCounter,
    /// Condition writes or pod lists that failed.
    pub errors: IntCounter,
    /// Unix seconds of the last transition (a lease expired or came back, or a pod marked).
    pub last_transition: IntGauge,
}

impl SentinelMetrics {
    /// Creates the metrics, registered in `registry` when given.
    pub fn new(registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let m = Self {
            leader: IntGauge::new(
                "podward_sentinel_leader",
                "1 while this sentinel replica holds the leader lease.",
            )?,
            leases: IntGauge::new(
                "podward_sentinel_leases",
                "Node leases the sentinel follows.",
            )?,
            expired: IntGauge::new(
                "podward_sentinel_leases_expired",
                "Node leases not renewed within their duration.",
            )?,
            waiting: IntGauge::new(
                "podward_sentinel_nodes_waiting",
                "Expired nodes not marked yet: held by the disruption rules, or waiting for a retry after a failed marking.",
            )?,
            held: IntGauge::new(
                "podward_sentinel_nodes_held",
                "Expired nodes whose marking is held: their zone is partially or fully disrupted, or every lease expired.",
            )?,
            expirations: IntCounter::new(
                "podward_sentinel_lease_expirations_total",
                "Node leases that expired.",
            )?,
            pods_marked: IntCounter::new(
                "podward_sentinel_pods_marked_total",
                "Pods whose readiness-gate condition the sentinel set False (reason ProberNotReporting).",
            )?,
            errors: IntCounter::new(
                "podward_sentinel_errors_total",
                "Pod lists or condition writes of the sentinel that failed.",
            )?,
            last_transition: IntGauge::new(
                "podward_sentinel_last_transition_timestamp_seconds",
                "Unix time of the sentinel's last transition (a lease expired or came back, a pod marked).",
            )?,
        };
        if let Some(r) = registry {
            r.register(Box::new(m.leader.clone()))?;
            r.register(Box::new(m.leases.clone()))?;
            r.register(Box::new(m.expired.clone()))?;
            r.register(Box::new(m.waiting.clone()))?;
            r.register(Box::new(m.held.clone()))?;
            r.register(Box::new(m.expirations.clone()))?;
            r.register(Box::new(m.pods_marked.clone()))?;
            r.register(Box::new(m.errors.clone()))?;
            r.register(Box::new(m.last_transition.clone()))?;
        }
        Ok(m)
    }
}
