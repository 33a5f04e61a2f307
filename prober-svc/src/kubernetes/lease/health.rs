//! What the node lease vouches for, and what it only reports.
//!
//! The lease says what kubelet's node lease says for kubelet: this prober is there and its
//! probing works on this node. So it is withdrawn only for what really stops probing or its
//! consequences node-wide: no pod source at all (neither the shim's stream nor containerd
//! polled), the node's pods never listed from the API for a whole lease duration since start
//! (nothing this prober finds can reach a pod), or the process itself (the renewal runs on the
//! probing runtime: a wedged runtime renews nothing), or the API unreachable for longer than the
//! lease (the renewal itself fails).
//!
//! A dropped pod watch (kube-rs resumes it from its resource version), a slow relist, one pod
//! whose status write is refused for good (a webhook's `403`, etcd's "request is too large"):
//! per-pod or transient problems. They are counted ([`crate::kubernetes::metrics::ApiMetrics`]),
//! reported on the lease ([`Health::problems`], shown by `podward-prober status`), and never a
//! reason to stop renewing: a node-wide `False` for one tenant's write would be the safety net
//! acting on every healthy pod of the node.

use std::fmt;
use std::time::Duration;

use podward_api::daemon::admin::Readiness;
use tokio::time::Instant;

use crate::kubernetes::metrics::ApiMetrics;

/// Why the prober cannot vouch for probing on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blind {
    /// Neither the shim's stream nor containerd gives the node's pods.
    SourceUnread,
    /// The node's pods were never listed from the API, for longer than the lease's duration
    /// since start.
    PodsNeverListed,
}

impl fmt::Display for Blind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SourceUnread => f.write_str("the pod source (shim or containerd) is not read"),
            Self::PodsNeverListed => f.write_str(
                "the node's pods were never listed from the API since this prober started",
            ),
        }
    }
}

/// Says whether the prober can vouch for probing (the renewer asks before each renewal).
pub trait Health: Send + Sync {
    /// `Ok` when the lease may be renewed, else why not.
    fn check(&self) -> Result<(), Blind>;

    /// Per-pod or transient problems worth an operator's look, one short line each (written on
    /// the lease, shown by `status`); none by default.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The real prober's health, read from the parts that know it: the source's readiness latch
/// (vouching) and the API side's metrics (reported).
pub struct ProberHealth {
    source: Readiness,
    api: ApiMetrics,
    started: Instant,
    /// How long the first list of the node's pods may take.
    first_list: Duration,
}

impl ProberHealth {
    /// Health from `source` and the first list of `api` (within `first_list` of now), problems
    /// from `api`.
    pub fn new(source: Readiness, api: ApiMetrics, first_list: Duration) -> Self {
        Self {
            source,
            api,
            started: Instant::now(),
            first_list,
        }
    }
}

impl Health for ProberHealth {
    fn check(&self) -> Result<(), Blind> {
        if !self.source.get() {
            return Err(Blind::SourceUnread);
        }
        // Set by the first complete list and kept: a resumed watch or a relist under way does
        // not clear it.
        if self.api.synced.get() != 1 && self.started.elapsed() > self.first_list {
            return Err(Blind::PodsNeverListed);
        }
        Ok(())
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.api.synced.get() != 1 {
            out.push("the node's pods are not listed from the API yet".to_owned());
        }
        let errors = self.api.watch_errors.get();
        if errors > 0 {
            out.push(format!(
                "the pod watch failed {errors} time(s) (last at Unix {}s), resumed",
                self.api.watch_last_error.get()
            ));
        }
        let failing = self.api.gate_failing.get();
        if failing > 0 {
            out.push(format!(
                "{failing} pod(s) whose readiness-gate write keeps failing (see the prober's log)"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_no_source_or_no_list_at_all_withdraws_the_lease_the_rest_is_reported() {
        let source = Readiness::default();
        let api = ApiMetrics::new(None).expect("metrics");
        let h = ProberHealth::new(source.clone(), api.clone(), Duration::from_secs(50));
        assert_eq!(h.check(), Err(Blind::SourceUnread));
        source.set(true);
        // Not listed yet, a watch that failed, a pod refused: reported, never blind.
        assert_eq!(h.check(), Ok(()));
        assert_eq!(h.problems().len(), 1);
        api.synced.set(1);
        api.watch_errors.inc();
        api.watch_last_error.set(1_790_000_000);
        api.gate_failing.set(1);
        assert_eq!(h.check(), Ok(()));
        let p = h.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("pod watch failed 1 time(s)"), "{p:?}");
        assert!(
            p[1].starts_with("1 pod(s) whose readiness-gate write"),
            "{p:?}"
        );
        // Never listed for a whole lease duration: nothing reaches a pod.
        let h = ProberHealth::new(
            source,
            ApiMetrics::new(None).expect("metrics"),
            Duration::from_secs(50),
        );
        assert_eq!(
            h.check(),
            Ok(()),
            "the first renewal does not wait for the list"
        );
        tokio::time::advance(Duration::from_secs(51)).await;
        assert_eq!(h.check(), Err(Blind::PodsNeverListed));
    }
}
