//! The hand-over at shutdown: a prober that stops (SIGTERM: a DaemonSet rollout replacing its
//! pod, a node drain, an uninstall) renews its node lease a last time with a longer duration,
//! the *hand-over*, so that its replacement has time to be created, pulled, started and synced
//! before the sentinel reads the lease as expired.
//!
//! Why a longer duration and not a "restarting" mark the sentinel would honour: the sentinel
//! already reads `renewTime` + `leaseDurationSeconds` as kube-apiserver's Lease semantics say,
//! so the hand-over works with every sentinel release, older ones included (a rollout of the
//! DaemonSet may replace probers before or after the sentinel), and it is bounded by the
//! lease itself: no second clock, no state that a crashed prober could leave behind. A
//! prober that never comes back costs its gated pods the hand-over instead of the lease
//! duration before the sentinel marks them; a prober that dies (SIGKILL, OOM, a crash) hands
//! nothing over, and its lease expires at its normal duration.
//!
//! Only a prober that vouches hands over: its last renewal succeeded and it can still vouch
//! ([`Health::check`]). A blind prober's lease is left to expire.

use std::time::Duration;

use super::health::Health;
use super::renewer::Renewer;

/// The default hand-over: a replacement's realistic delay (pod deletion, creation, an image
/// pull, the first sync) with room to spare.
pub const DEFAULT_HANDOVER: Duration = Duration::from_secs(120);

/// Upper bound of the hand-over: longer than this, the sentinel would no longer be a safety net
/// for a prober that does not come back.
pub const MAX_HANDOVER: Duration = Duration::from_secs(600);

impl Renewer {
    /// At shutdown, renews once for `handover` (never less than the lease's duration, at most
    /// [`MAX_HANDOVER`]) when it vouches and can still vouch; at most one renew interval (and
    /// 5 s) is spent on it. Replaces the settings' hand-over.
    pub fn with_handover(mut self, handover: Option<Duration>) -> Self {
        self.settings.handover = handover;
        self
    }

    /// The last renewal, with the hand-over's duration (see the module's doc).
    pub(super) async fn hand_over(&mut self, health: &dyn Health, vouching: bool) {
        let Some(handover) = self.settings.handover else {
            return;
        };
        let handover = handover.max(self.settings.duration).min(MAX_HANDOVER);
        if !vouching || health.check().is_err() {
            tracing::info!(node = %self.settings.node,
                "stopping without a node lease hand-over: this prober does not vouch for probing now");
            return;
        }
        let bound = self.settings.renew_interval.min(Duration::from_secs(5));
        self.settings.duration = handover;
        match tokio::time::timeout(bound, self.renew()).await {
            Ok(Ok(())) => {
                self.metrics.renewals.with_label_values(&["handover"]).inc();
                tracing::info!(node = %self.settings.node, handover_s = handover.as_secs(),
                    "node lease handed over: renewed for the replacement's start");
            }
            Ok(Err(e)) => tracing::warn!(node = %self.settings.node, error = %e,
                "node lease hand-over failed; the lease expires at its normal duration"),
            Err(_) => tracing::warn!(node = %self.settings.node, ms = bound.as_millis() as u64,
                "node lease hand-over took too long; the lease expires at its normal duration"),
        }
    }
}
