//! `/readyz` with a node lease: the prober is ready when it holds a complete view of the node's
//! pods (the source's latch) *and* its node lease is current (renewed within its duration). A
//! prober that cannot renew is what the sentinel will mark the node for; a DaemonSet rollout
//! must stop at it, not roll it to the next node.

use std::time::Duration;

use podward_api::daemon::admin::Readiness;
use tokio::sync::watch;

use crate::kubernetes::vouch::Vouch;

/// How often the verdict is taken again while nothing else wakes it (the lease expiring is a
/// matter of time, not of an event).
const RECHECK: Duration = Duration::from_millis(250);

/// Sets `ready` to `source && vouch.current()` (with a detail line saying which part is
/// missing) until `stop` fires.
pub async fn follow(
    ready: Readiness,
    source: Readiness,
    vouch: Vouch,
    mut stop: watch::Receiver<bool>,
) {
    let mut renewals = vouch.renewals();
    loop {
        if *stop.borrow() {
            return;
        }
        let (seen, current) = (source.get(), vouch.current());
        ready.set(seen && current);
        ready.set_detail(match (seen, current) {
            (true, true) => None,
            (false, _) => Some("the node's pods are not read (shim or containerd)".to_owned()),
            (true, false) => {
                Some("the node lease is not current (not renewed within its duration)".to_owned())
            }
        });
        tokio::select! {
            _ = stop.changed() => return,
            _ = renewals.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ready_only_while_the_pods_are_read_and_the_lease_is_current() {
        let (ready, source) = (Readiness::default(), Readiness::default());
        let vouch = Vouch::new(Duration::from_secs(4));
        let (tx, rx) = watch::channel(false);
        tokio::spawn(follow(ready.clone(), source.clone(), vouch.clone(), rx));
        source.set(true);
        tokio::time::sleep(RECHECK * 2).await;
        assert!(!ready.get(), "not before the first renewal");
        vouch.renewed();
        tokio::time::sleep(RECHECK * 2).await;
        assert!(ready.get());
        source.set(false);
        tokio::time::sleep(RECHECK * 2).await;
        assert!(!ready.get(), "not while the pods are not read");
        source.set(true);
        tokio::time::sleep(RECHECK * 2).await;
        assert!(ready.get());
        // No renewal for the lease's duration: not ready.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!ready.get(), "not once the lease is past its duration");
        assert!(ready.detail().is_some_and(|d| d.contains("lease")));
        tx.send_replace(true);
    }
}
