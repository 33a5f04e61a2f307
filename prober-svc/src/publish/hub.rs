//! The event fan-out behind `Watch`: every [`crate::publish::event::Event`] becomes a wire event
//! with the next sequence number, in one bounded ring (`tokio::sync::broadcast`) that all
//! subscribers share. Publishing never waits for a subscriber; one that falls more than the ring's
//! size behind finds out (`Lagged`) instead of silently missing events.

use std::sync::Arc;

use parking_lot::Mutex;
use podward_api::prober::v1 as api;
use tokio::sync::broadcast;

use crate::publish::event::{Event, EventSink};
use crate::publish::wire;

/// Events a Watch subscriber may fall behind before it is resynced.
pub const WATCH_QUEUE: usize = 4096;

/// The event fan-out behind `Watch`.
#[derive(Clone)]
pub struct Hub {
    tx: broadcast::Sender<api::ProbeEvent>,
    seq: Arc<Mutex<u64>>,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new(WATCH_QUEUE)
    }
}

impl Hub {
    /// A hub whose subscribers may lag `capacity` events.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self {
            tx,
            seq: Arc::new(Mutex::new(0)),
        }
    }

    /// Sends `ev` to every subscriber with the next sequence number (never blocks; no
    /// subscriber is fine).
    pub fn send(&self, mut ev: api::ProbeEvent) {
        // The lock keeps sequence numbers in send order across concurrent publishers.
        let mut seq = self.seq.lock();
        *seq += 1;
        ev.seq = *seq;
        let _ = self.tx.send(ev);
    }

    /// A new subscription, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<api::ProbeEvent> {
        self.tx.subscribe()
    }

    /// A new subscription unless `max` are live already (then: how many are). A dropped
    /// subscription frees its place at once (its receiver is gone).
    pub fn try_subscribe(&self, max: usize) -> Result<broadcast::Receiver<api::ProbeEvent>, usize> {
        // Under the sequence lock so two concurrent subscribers cannot both take the last place.
        let _seq = self.seq.lock();
        match self.tx.receiver_count() {
            n if n >= max => Err(n),
            _ => Ok(self.tx.subscribe()),
        }
    }
}

impl EventSink for Hub {
    fn publish(&self, event: &Event) {
        if let Some(ev) = wire::event(event) {
            self.send(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use tokio_stream::wrappers::BroadcastStream;
    use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

    use super::*;

    fn ev(uid: &str) -> api::ProbeEvent {
        api::ProbeEvent {
            pod_uid: uid.to_owned(),
            event: Some(api::probe_event::Event::Result(
                api::ProbeResult::Success as i32,
            )),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_lagging_subscriber_gets_resync_instead_of_a_gap_and_memory_stays_bounded() {
        let hub = Hub::new(4);
        let mut slow = BroadcastStream::new(hub.subscribe());
        for _ in 0..10 {
            hub.send(ev("u"));
        }
        let first = slow.next().await.expect("item");
        assert!(
            matches!(first, Err(BroadcastStreamRecvError::Lagged(6))),
            "{first:?}"
        );
        // The 4 newest remain, in order, with consecutive sequence numbers.
        let mut rest = Vec::new();
        for _ in 0..4 {
            rest.push(slow.next().await.expect("item").expect("event").seq);
        }
        assert_eq!(rest, vec![7, 8, 9, 10]);
    }

    #[tokio::test]
    async fn publishing_without_subscribers_never_blocks_or_fails() {
        let hub = Hub::new(1);
        for _ in 0..1000 {
            hub.send(ev("u"));
        }
        let mut rx = hub.subscribe();
        hub.send(ev("v"));
        assert_eq!(rx.recv().await.expect("event").seq, 1001);
    }
}
