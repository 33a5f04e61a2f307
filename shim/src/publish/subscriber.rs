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

use super::Publisher;

/// A subscriber's ordered stream of events. Dropping it unsubscribes (the publisher notices the
/// closed queue on its next event).
pub struct Subscription {
    inner: BoxStream<'static, WatchEvent>,
}

struct State {
    publisher: Publisher,
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
    pub(super) fn new(
        publisher: Publisher,
        first: WatchEvent,
        rx: mpsc::Receiver<Arc<WatchEvent>>,
        resync: Arc<AtomicBool>,
    ) -> Self {
        let gauge = publisher.metrics.subscribers.clone();
        gauge.inc();
        let state = State {
            publisher,
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
                let ev = st.publisher.resync_snapshot(&st.resync);
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
