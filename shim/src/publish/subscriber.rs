//! One Watch subscriber's stream: the initial snapshot, then queued events, then (after an
//! overflow, once the queue is drained) a resync snapshot.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::Stream;
use futures::stream::BoxStream;
use podward_api::shim::v1::WatchEvent;
use tokio::sync::mpsc;

/// A subscriber's ordered stream of events. Dropping it unsubscribes (the publisher notices the
/// closed queue on its next event).
pub struct Subscription {
    inner: BoxStream<'static, WatchEvent>,
}

/// Makes the snapshot owed to a subscriber whose queue overflowed, clearing its flag under the
/// same lock, so that the events after it continue exactly at its `seq`.
type ResyncSnapshot = Box<dyn Fn(&AtomicBool) -> WatchEvent + Send>;

struct State {
    resync_snapshot: ResyncSnapshot,
    first: Option<WatchEvent>,
    rx: mpsc::Receiver<Arc<WatchEvent>>,
    resync: Arc<AtomicBool>,
    _gauge: GaugeGuard,
}

/// Keeps `podward_shim_subscribers` equal to the live subscriptions.
struct GaugeGuard(prometheus::IntGauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Subscription {
    /// A stream of `first`, then what `rx` queues; once the queue is drained after `resync` was
    /// set, what `resync_snapshot` makes. `gauge` counts it while it lives.
    pub(super) fn new(
        gauge: prometheus::IntGauge,
        first: WatchEvent,
        rx: mpsc::Receiver<Arc<WatchEvent>>,
        resync: Arc<AtomicBool>,
        resync_snapshot: impl Fn(&AtomicBool) -> WatchEvent + Send + 'static,
    ) -> Self {
        gauge.inc();
        let state = State {
            resync_snapshot: Box::new(resync_snapshot),
            first: Some(first),
            rx,
            resync,
            _gauge: GaugeGuard(gauge),
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            if let Some(first) = st.first.take() {
                return Some((first, st));
            }
            match st.rx.try_recv() {
                Ok(ev) => return Some((Arc::unwrap_or_clone(ev), st)),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            // The queue is drained: if events were dropped for us, the snapshot replaces them.
            if st.resync.load(Ordering::Relaxed) {
                let ev = (st.resync_snapshot)(&st.resync);
                return Some((ev, st));
            }
            let ev = st.rx.recv().await?;
            Some((Arc::unwrap_or_clone(ev), st))
        });
        Self {
            inner: Box::pin(inner),
        }
    }
}

impl Stream for Subscription {
    type Item = WatchEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        self.inner.as_mut().poll_next(cx)
    }
}
