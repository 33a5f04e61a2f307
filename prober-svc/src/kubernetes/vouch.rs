//! Whether this prober vouches for its node now: its node lease renewed within the lease's
//! duration. The gate writer asks before it overwrites the sentinel's `False`: a prober whose
//! lease is not current (starting, or cut off from the API) may be the very reason the sentinel
//! marked the node, and takes over only once it vouches again.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

/// The renewer's last success, shared with the gate. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Vouch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    duration: Duration,
    renewed: Mutex<Option<Instant>>,
    /// Bumped at each renewal (the gate looks at the marked pods again).
    renewals: watch::Sender<u64>,
}

impl Vouch {
    /// Not vouching until the first renewal; a renewal vouches for `duration`.
    pub fn new(duration: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                duration,
                renewed: Mutex::new(None),
                renewals: watch::channel(0).0,
            }),
        }
    }

    /// The lease was renewed now.
    pub fn renewed(&self) {
        *self.inner.renewed.lock() = Some(Instant::now());
        self.inner.renewals.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether the last renewal is within the lease's duration.
    pub fn current(&self) -> bool {
        self.inner
            .renewed
            .lock()
            .is_some_and(|at| at.elapsed() < self.inner.duration)
    }

    /// Changes at each renewal.
    pub fn renewals(&self) -> watch::Receiver<u64> {
        self.inner.renewals.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn vouches_for_a_lease_duration_after_each_renewal() {
        let v = Vouch::new(Duration::from_secs(50));
        let rx = v.renewals();
        assert!(!v.current(), "not before the first renewal");
        v.renewed();
        assert!(v.current());
        assert!(rx.has_changed().expect("open"));
        tokio::time::advance(Duration::from_secs(51)).await;
        assert!(!v.current());
    }
}
