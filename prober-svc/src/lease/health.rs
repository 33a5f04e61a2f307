//! Whether the prober's conditions are current, the question the node lease answers: its pod
//! source is read, its view of the node's pods in the API is synced, and its gate writer drains
//! (a pending condition write made progress within the stall window).

use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::daemon::admin::Readiness;
use tokio::time::Instant;

use crate::kubernetes::metrics::ApiMetrics;

/// Why the prober is not current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blind {
    /// Neither the shim's stream nor containerd gives the node's pods.
    SourceUnread,
    /// The node's pods are not listed (or no longer watched) from the Kubernetes API.
    PodsNotSynced,
    /// Condition writes are pending and none succeeded for this long.
    GateStuck {
        /// Writes waiting.
        pending: i64,
        /// Time without a successful write.
        for_: Duration,
    },
}

impl fmt::Display for Blind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SourceUnread => f.write_str("the pod source (shim or containerd) is not read"),
            Self::PodsNotSynced => f.write_str("the node's pods are not synced from the API"),
            Self::GateStuck { pending, for_ } => write!(
                f,
                "{pending} readiness-gate write(s) pending and none succeeded for {}s",
                for_.as_secs()
            ),
        }
    }
}

/// Says whether the prober is current (the renewer asks before each renewal).
pub trait Health: Send + Sync {
    /// `Ok` when current, else why not.
    fn check(&self) -> Result<(), Blind>;
}

/// The real prober's health, read from the parts that know it: the source's readiness latch,
/// the reflector's `synced` gauge and the gate writer's pending gauge and write counter.
pub struct ProberHealth {
    source: Readiness,
    api: ApiMetrics,
    stall: Duration,
    progress: Mutex<Progress>,
}

struct Progress {
    /// Successful writes (ok or gone) counted at the last check.
    done: u64,
    /// When writes last progressed (or nothing was pending).
    at: Instant,
}

impl ProberHealth {
    /// Health from `source` and `api`; the gate counts as stuck after `stall` without progress.
    pub fn new(source: Readiness, api: ApiMetrics, stall: Duration) -> Self {
        Self {
            source,
            api,
            stall,
            progress: Mutex::new(Progress {
                done: 0,
                at: Instant::now(),
            }),
        }
    }

    fn done(&self) -> u64 {
        ["ok", "gone"]
            .iter()
            .map(|r| self.api.gate_writes.with_label_values(&[r]).get())
            .sum()
    }
}

impl Health for ProberHealth {
    fn check(&self) -> Result<(), Blind> {
        if !self.source.get() {
            return Err(Blind::SourceUnread);
        }
        if self.api.synced.get() != 1 {
            return Err(Blind::PodsNotSynced);
        }
        let pending = self.api.gate_pending.get();
        let done = self.done();
        let now = Instant::now();
        let mut p = self.progress.lock();
        if pending == 0 || done != p.done {
            p.done = done;
            p.at = now;
        }
        let for_ = now.saturating_duration_since(p.at);
        if for_ > self.stall {
            return Err(Blind::GateStuck { pending, for_ });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn blind_on_source_sync_or_a_stuck_gate() {
        let source = Readiness::default();
        let api = ApiMetrics::new(None).expect("metrics");
        let h = ProberHealth::new(source.clone(), api.clone(), Duration::from_secs(40));
        assert_eq!(h.check(), Err(Blind::SourceUnread));
        source.set(true);
        assert_eq!(h.check(), Err(Blind::PodsNotSynced));
        api.synced.set(1);
        assert_eq!(h.check(), Ok(()));
        // Pending writes that succeed now and then: draining.
        api.gate_pending.set(3);
        tokio::time::advance(Duration::from_secs(30)).await;
        api.gate_writes.with_label_values(&["ok"]).inc();
        assert_eq!(h.check(), Ok(()));
        // Pending and no success for longer than the stall window: stuck.
        tokio::time::advance(Duration::from_secs(41)).await;
        assert!(matches!(
            h.check(),
            Err(Blind::GateStuck { pending: 3, .. })
        ));
        // Drained: current again.
        api.gate_pending.set(0);
        assert_eq!(h.check(), Ok(()));
    }
}
