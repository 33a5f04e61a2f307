//! The gate and the node lease: the sentinel's `False` (reason `ProberNotReporting`) is left
//! as it is while this prober's node lease is not current, and the pods it marked are looked at
//! again at each renewal.

use super::state::State;
use crate::kubernetes::names::SENTINEL_REASON;
use crate::kubernetes::vouch::Vouch;
use crate::model::api_pod::GateCondition;

/// Whether a write to a pod whose condition is `current` must wait for the node lease: the
/// sentinel marked it, and this prober does not vouch for its node now (`vouch`: the lease's,
/// when the prober keeps one).
pub(super) fn held(vouch: Option<&Vouch>, current: Option<&GateCondition>) -> bool {
    current.is_some_and(|c| c.reason == SENTINEL_REASON) && vouch.is_some_and(|v| !v.current())
}

/// The pods whose condition is the sentinel's mark.
pub(super) fn marked(st: &State) -> Vec<String> {
    st.pods
        .iter()
        .filter(|(_, p)| {
            p.current
                .as_ref()
                .is_some_and(|c| c.reason == SENTINEL_REASON)
        })
        .map(|(uid, _)| uid.clone())
        .collect()
}

/// Waits for the next renewal of the node lease: true; false when no renewal can come (no
/// lease, or its renewer is gone); never without a lease.
pub(super) async fn renewed(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
