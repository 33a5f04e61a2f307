//! The stop fan-out every daemon uses: one trigger, any number of tasks waiting for it.
//!
//! A daemon's `run` awaits the shutdown future it was given, then triggers [`Stop`]; its admin
//! endpoint, API servers and background loops each hold a [`Stop::stopped`] future and wind down.
//! `tokio::sync::watch` rather than a broadcast channel: a task that subscribes after the trigger
//! still sees it, so no late starter can miss the stop.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

/// A one-way stop signal shared by all of a daemon's tasks. Cloning shares the same signal.
#[derive(Clone, Debug)]
pub struct Stop {
    tx: Arc<watch::Sender<bool>>,
}

impl Stop {
    /// A signal not yet triggered.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Tells every waiter to stop. Idempotent.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether [`trigger`](Self::trigger) was called.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    /// A future that resolves once the signal is triggered (at once if it already was).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            // An error means the sender is gone, which only happens after every `Stop` was
            // dropped: nobody is left to trigger, so treat it as stopped.
            let _ = rx.wait_for(|stopped| *stopped).await;
        }
    }

    /// A receiver for loops that `select!` on `changed()` themselves.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

impl Default for Stop {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn every_waiter_wakes_including_one_that_subscribes_after_the_trigger() {
        let stop = Stop::new();
        let early = tokio::spawn(stop.stopped());
        assert!(!stop.is_stopped());
        stop.trigger();
        let late = stop.stopped();
        tokio::time::timeout(Duration::from_secs(5), async {
            early.await.expect("early waiter");
            late.await;
        })
        .await
        .expect("both waiters resolve after the trigger");
        assert!(stop.is_stopped());
    }

    #[tokio::test]
    async fn an_untriggered_signal_keeps_waiters_waiting() {
        let stop = Stop::new();
        let waited = tokio::time::timeout(Duration::from_millis(50), stop.stopped()).await;
        assert!(waited.is_err(), "no trigger, no wake-up");
    }
}
