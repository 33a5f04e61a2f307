//! One client connection and its own connection to containerd.
//!
//! How it ends:
//! - containerd closes: the client gets the same close;
//! - the client closes: containerd gets a FIN, as from the client itself, and its answers to what
//!   was in flight are still read for [`DRAIN_AFTER_CLIENT`](super::DRAIN_AFTER_CLIENT) (they say
//!   whether a mutating call took effect: *undelivered* results);
//! - no connection preface within the handshake timeout: both are closed;
//! - shutdown: a GOAWAY (last stream 2^31-1, NO_ERROR) is added to the client's side at a frame
//!   boundary, so the client opens no new stream here and every stream it already opened is
//!   served; once no call is open and the connection has been quiet briefly, or at the shutdown
//!   grace, both are closed. The client's next calls go to a new connection, which waits in the
//!   listening socket's backlog for the next shim.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::pump::{Activity, Pump, UpEnd};
use super::socket::{Socket, Writer};
use super::{DRAIN_AFTER_CLIENT, Relay};
use crate::h2read::Side;
use crate::observe::{Conversation, SideReader};

/// How long a connection must have been quiet, with no open call, before a graceful close: the
/// client may have sent a new stream just before it read the GOAWAY.
const QUIET_BEFORE_CLOSE: Duration = Duration::from_millis(50);

/// A connection with observation off gives no count of open calls: it is closed once it has
/// been quiet this long.
const QUIET_UNOBSERVED: Duration = Duration::from_millis(200);

/// How often a stopping connection checks whether it may close.
const STOP_TICK: Duration = Duration::from_millis(10);

/// Keeps `podward_shim_connections` equal to the open connections.
struct Open(prometheus::IntGauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Relays `client` until one of the ends above.
pub(super) async fn relay(relay: Arc<Relay>, client: UnixStream, mut stop: watch::Receiver<bool>) {
    let accepted = Instant::now();
    // Borrowed, not cloned: a clone would touch every collector's count twice per connection.
    let metrics = relay.recorder.metrics();
    metrics.connections.inc();
    let _open = Open(metrics.connections.clone());
    let upstream = match UnixStream::connect(&relay.containerd).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "containerd not reachable; answering UNAVAILABLE");
            super::unavailable::answer(client, accepted + relay.handshake_timeout).await;
            return;
        }
    };
    let (client, upstream) = match (Socket::new(client), Socket::new(upstream)) {
        (Ok(client), Ok(upstream)) => (Arc::new(client), Arc::new(upstream)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "could not register a relayed connection's sockets; closed");
            return;
        }
    };
    let conversation = Conversation::new(relay.recorder.clone());
    let activity = Activity::new();
    let pump = |src: &Arc<Socket>, dst: &Arc<Socket>, side, direction: &str, buffer| Pump {
        src: src.clone(),
        dst: Writer::new(dst.clone()),
        reader: SideReader::new(side, conversation.clone(), relay.faults.clone()),
        bytes: metrics.relayed_bytes.with_label_values(&[direction]),
        activity: activity.clone(),
        buffer,
    };
    let up = pump(
        &client,
        &upstream,
        Side::Client,
        "to_containerd",
        relay.buffer.min(super::REQUEST_BUFFER),
    )
    .client_to_containerd(accepted + relay.handshake_timeout);
    let goaway_sent = Arc::new(AtomicBool::new(false));
    let down = pump(&upstream, &client, Side::Server, "to_client", relay.buffer)
        .containerd_to_client(relay.faults.clone(), stop.clone(), goaway_sent.clone());
    tokio::pin!(up);
    tokio::pin!(down);

    let mut ending = Ending::default();
    loop {
        if ending.stopping_until.is_none() && *stop.borrow_and_update() {
            ending.stop(relay.shutdown_grace);
        }
        tokio::select! {
            _ = &mut down => break,
            end = &mut up, if !ending.up_done => {
                if end == UpEnd::HandshakeTimeout {
                    metrics.handshake_timeouts.with_label_values(&["cri"]).inc();
                    tracing::debug!("no HTTP/2 preface in time; connection closed");
                }
                if ending.up_ended(end) {
                    break;
                }
            }
            r = stop.changed(), if ending.stopping_until.is_none() => {
                if r.is_err() {
                    ending.stop(relay.shutdown_grace);
                }
            }
            _ = sleep_until_opt(ending.wake()) => {
                let sent = goaway_sent.load(Ordering::Relaxed);
                if ending.due(|| may_close(&conversation, &activity, sent)) {
                    break;
                }
            }
        }
    }
    conversation.close(ending.client_left);
}

/// Where a connection stands on its way to one of the ends above, between the events of
/// [`relay`]'s loop.
#[derive(Debug, Default)]
struct Ending {
    /// The client-to-containerd direction has ended.
    up_done: bool,
    /// The client closed, or sent no preface in time.
    client_left: bool,
    /// The client closed: containerd's answers are still read until then.
    drain_until: Option<Instant>,
    /// Shutdown began: closed by then at the latest.
    stopping_until: Option<Instant>,
}

impl Ending {
    /// Shutdown began: the connection is closed within `grace`.
    fn stop(&mut self, grace: Duration) {
        self.stopping_until = Some(Instant::now() + grace);
    }

    /// The client-to-containerd direction ended so; true when the connection ends now.
    fn up_ended(&mut self, end: UpEnd) -> bool {
        self.up_done = true;
        match end {
            UpEnd::HandshakeTimeout => {
                self.client_left = true;
                return true;
            }
            UpEnd::ClientClosed => {
                self.client_left = true;
                self.drain_until = Some(Instant::now() + DRAIN_AFTER_CLIENT);
            }
            UpEnd::UpstreamClosed => {}
        }
        false
    }

    /// When to look again with no event: the drain's end, and every [`STOP_TICK`] while
    /// stopping.
    fn wake(&self) -> Option<Instant> {
        let mut wake = self.drain_until;
        if self.stopping_until.is_some() {
            let tick = Instant::now() + STOP_TICK;
            wake = Some(wake.map_or(tick, |d| d.min(tick)));
        }
        wake
    }

    /// Whether the connection ends now: the drain is over, or shutdown's grace is, or no call
    /// would be cut (`may_close`, asked only while stopping).
    fn due(&self, may_close: impl FnOnce() -> bool) -> bool {
        let now = Instant::now();
        if self.drain_until.is_some_and(|d| now >= d) {
            return true;
        }
        self.stopping_until
            .is_some_and(|deadline| now >= deadline || may_close())
    }
}

/// Whether a stopping connection can be closed without cutting a call.
fn may_close(conversation: &Conversation, activity: &Activity, goaway_sent: bool) -> bool {
    match conversation.active_streams() {
        Some(open) => goaway_sent && open == 0 && activity.quiet_for() >= QUIET_BEFORE_CLOSE,
        None => activity.quiet_for() >= QUIET_UNOBSERVED,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
