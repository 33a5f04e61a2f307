//! The gate and the node lease: the sentinel's `False` (reason `ProberNotReporting`) is left
//! as it is while this prober's node lease is not current, and the pods it marked are looked at
//! again at each renewal.

use super::Gate;
use crate::kubernetes::names::SENTINEL_REASON;
use crate::kubernetes::vouch::Vouch;
use crate::model::api_pod::GateCondition;

impl Gate {
    /// Holds writes over the sentinel's `False` (reason [`SENTINEL_REASON`]) while `vouch`
    /// is not current (the node lease not renewed within its duration), and looks at those pods
    /// again at each renewal. Set once, before [`Gate::run`].
    pub fn set_vouch(&self, vouch: Vouch) {
        let _ = self.inner.vouch.set(vouch);
    }

    /// Whether a write to a pod whose condition is `current` must wait for the node lease:
    /// the sentinel marked it, and this prober does not vouch for its node now.
    pub(super) fn held(&self, current: Option<&GateCondition>) -> bool {
        current.is_some_and(|c| c.reason == SENTINEL_REASON)
            && self.inner.vouch.get().is_some_and(|v| !v.current())
    }

    /// Looks again at every pod the sentinel marked (the node lease was renewed).
    pub(super) fn touch_marked(&self) {
        let mut st = self.inner.state.lock();
        let marked: Vec<String> = st
            .pods
            .iter()
            .filter(|(_, p)| {
                p.current
                    .as_ref()
                    .is_some_and(|c| c.reason == SENTINEL_REASON)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        if marked.is_empty() {
            return;
        }
        for uid in &marked {
            Self::mark(&mut st, uid);
        }
        drop(st);
        self.inner.wake.notify_one();
    }
}

/// Waits for the next renewal of the node lease: true; false when no renewal can come (no
/// lease, or its renewer is gone); never without a lease.
pub(super) async fn renewed(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
