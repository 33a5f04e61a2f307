//! The sentinel's events, through the same client-go-exact path as the prober's
//! ([`crate::kubernetes::correlate`], core `v1` events: a series' note is never frozen): one
//! `Warning` `ProberNotReporting` per pod marked, and on the Node one when its pods are marked,
//! one (`Warning`, `ProberMarkingHeld`) when its lease expired in a zone whose marking is held,
//! and one (`Normal`, `ProberReporting`) when its prober renews again.
//!
//! Publishing never waits: notes go into a bounded queue one task drains (a full queue drops
//! the note: an event lost is not worth holding a node's marking). A write that fails on the way
//! is tried again a few times, a second apart; a rejection is final.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::kubernetes::correlate::{Correlator, Involved, Note, Verdict};
use crate::kubernetes::events::{MAX_NOTE_BYTES, event_namespace, write_from};

/// The events' reporting component.
pub const COMPONENT: &str = "podward-sentinel";
/// The reason of the Node's event when its prober renews again.
pub const REASON_BACK: &str = "ProberReporting";
/// The reason of the Node's event when its lease expired but marking is held in its zone.
pub const REASON_HELD: &str = "ProberMarkingHeld";
/// Notes waiting to be written, at most.
const QUEUE: usize = 4096;
/// Tries of one write.
const TRIES: u32 = 3;

/// Where the sentinel records. Cheap to clone.
#[derive(Clone)]
pub struct SentinelEvents {
    tx: mpsc::Sender<Note>,
    clock: Clock,
}

impl SentinelEvents {
    /// Records through `client` as `identity` (the replica) from a task of its own, which ends
    /// with the last clone.
    pub fn spawn(client: kube::Client, identity: &str, clock: Clock) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain(rx, client, identity.to_owned()));
        Self { tx, clock }
    }

    /// A `Warning` about pod `namespace/name` (`uid`).
    pub fn pod(&self, namespace: &str, name: &str, uid: &str, reason: &'static str, message: &str) {
        self.send(
            Involved {
                kind: "Pod",
                uid: uid.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                field_path: String::new(),
            },
            true,
            reason,
            message,
        );
    }

    /// An event about Node `node` (`uid`, "" when unknown).
    pub fn node(&self, node: &str, uid: &str, warning: bool, reason: &'static str, message: &str) {
        self.send(
            Involved {
                kind: "Node",
                uid: uid.to_owned(),
                namespace: String::new(),
                name: node.to_owned(),
                field_path: String::new(),
            },
            warning,
            reason,
            message,
        );
    }

    fn send(&self, involved: Involved, warning: bool, reason: &'static str, message: &str) {
        let mut message = message.to_owned();
        if message.len() > MAX_NOTE_BYTES {
            let mut end = MAX_NOTE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let note = Note {
            involved,
            warning,
            reason,
            message,
            at_ns: self.clock.now_ns(),
        };
        if self.tx.try_send(note).is_err() {
            tracing::debug!("the sentinel's event queue is full; an event is dropped");
        }
    }
}

async fn drain(mut rx: mpsc::Receiver<Note>, client: kube::Client, identity: String) {
    let mut correlator = Correlator::default();
    while let Some(note) = rx.recv().await {
        let c = match correlator.correlate(note) {
            Verdict::Write(c) => c,
            Verdict::Filtered => continue,
        };
        let api: kube::Api<CoreEvent> =
            kube::Api::namespaced(client.clone(), event_namespace(&c.involved));
        for attempt in 1..=TRIES {
            match write_from(&api, &c, COMPONENT, &identity).await {
                Ok(()) => break,
                Err(kube::Error::Api(s)) if s.code != 429 && s.code < 500 => {
                    tracing::debug!(code = s.code, message = %s.message, "the API refused the sentinel's event");
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, attempt, "cannot record the sentinel's event");
                    if attempt < TRIES {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }
    }
}
