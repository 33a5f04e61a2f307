//! One client connection and its own connection to containerd, relayed by a thread of its own
//! that waits in `poll(2)` on the two sockets (and on the relay's stop signal).
//!
//! How it ends:
//! - containerd closes: the client gets the same close;
//! - the client closes: containerd gets a FIN, as from the client itself, and its answers to what
//!   was in flight are still read for [`DRAIN_AFTER_CLIENT`] (they say
//!   whether a mutating call took effect: *undelivered* results);
//! - no connection preface within the handshake timeout: both are closed;
//! - shutdown: a GOAWAY (last stream 2^31-1, NO_ERROR) is added to the client's side at a frame
//!   boundary, so the client opens no new stream here and every stream it already opened is
//!   served; once no call is open and the connection has been quiet briefly, or at the shutdown
//!   grace, both are closed. The client's next calls go to a new connection, which waits in the
//!   listening socket's backlog for the next shim.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::pump::{Got, Pump};
use super::settings::{DRAIN_AFTER_CLIENT, REQUEST_BUFFER, Relay};
use crate::h2read::{Side, graceful_goaway};
use crate::observe::{Conversation, SideReader};

/// How long a connection must have been quiet, with no open call, before a graceful close: the
/// client may have sent a new stream just before it read the GOAWAY.
const QUIET_BEFORE_CLOSE: Duration = Duration::from_millis(50);

/// A connection with observation off gives no count of open calls: it is closed once it has
/// been quiet this long.
const QUIET_UNOBSERVED: Duration = Duration::from_millis(200);

/// How often a stopping connection checks whether it may close.
const STOP_TICK: Duration = Duration::from_millis(10);

/// How often a held response (fault injection) checks whether its hold is over.
const HOLD_TICK: Duration = Duration::from_millis(10);

/// How the client-to-containerd direction ended.
#[derive(Debug, PartialEq, Eq)]
enum UpEnd {
    /// The client closed (or its socket failed); containerd was told with a FIN.
    ClientClosed,
    /// containerd's socket would take no more.
    UpstreamClosed,
    /// No connection preface before the deadline.
    HandshakeTimeout,
}

/// Which descriptor an entry of the poll set is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Client,
    Containerd,
    Stop,
}

/// Relays `client` to `upstream` (both non-blocking) until one of the ends above; `stop`
/// becomes readable (or hung up) when shutdown begins, and the client's preface is due by
/// `handshake_deadline`.
pub(super) fn relay(
    relay: &Relay,
    client: &UnixStream,
    upstream: &UnixStream,
    stop: BorrowedFd<'_>,
    handshake_deadline: Instant,
) {
    let metrics = relay.recorder.metrics();
    let mut conversation = Conversation::new(relay.recorder.clone());
    let side = |side| SideReader::new(side, relay.faults.clone());
    let bytes = |direction| metrics.relayed_bytes.with_label_values(&[direction]);
    let mut up = Pump::new(
        side(Side::Client),
        bytes("to_containerd"),
        relay.buffer.min(REQUEST_BUFFER),
    );
    let mut down = Pump::new(side(Side::Server), bytes("to_client"), relay.buffer);
    let mut ending = Ending::default();
    let mut last_moved = Instant::now();
    let mut goaway_sent = false;
    // The client's socket takes no more writes: containerd's answers are read, not relayed.
    let mut client_gone = false;

    loop {
        if ending.stopping_until.is_some()
            && !goaway_sent
            && !client_gone
            && down.wants_read()
            && down.reader().at_boundary(&conversation)
        {
            goaway_sent = true;
            client_gone = down
                .insert(&mut conversation, client, &graceful_goaway())
                .is_err();
        }

        let read_client = !ending.up_done && up.wants_read();
        let read_containerd = down.wants_read();
        let mut client_events = PollFlags::empty();
        client_events.set(PollFlags::POLLIN, read_client);
        client_events.set(PollFlags::POLLOUT, !client_gone && down.wants_write());
        let mut upstream_events = PollFlags::empty();
        upstream_events.set(PollFlags::POLLIN, read_containerd);
        upstream_events.set(PollFlags::POLLOUT, !ending.up_done && up.wants_write());
        let stop_events = if ending.stopping_until.is_none() {
            PollFlags::POLLIN
        } else {
            PollFlags::empty()
        };
        let wanted = [
            (Who::Client, client.as_fd(), client_events),
            (Who::Containerd, upstream.as_fd(), upstream_events),
            (Who::Stop, stop, stop_events),
        ];
        let wake = ending.wake(
            (!up.reader().preface_done(&conversation)).then_some(handshake_deadline),
            down.is_held(),
        );
        let ready = match wait(&wanted, wake) {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(error = %e, "CRI connection: poll failed; connection closed");
                break;
            }
        };

        if ready.stop {
            ending.stop(stop_deadline(
                Instant::now(),
                conversation.latest_deadline(),
                relay.shutdown_grace,
                relay.max_shutdown_grace,
            ));
        }
        if ready.client && !client_gone && down.wants_write() {
            client_gone = down.flush(&mut conversation, client).is_err();
        }
        if ready.containerd
            && !ending.up_done
            && up.wants_write()
            && up.flush(&mut conversation, upstream).is_err()
        {
            // containerd's socket takes no more: its answers are still relayed until it closes.
            ending.up_ended(UpEnd::UpstreamClosed);
        }
        if ready.client && read_client && up.wants_read() {
            match up.read(client) {
                Got::Bytes { n, drained } => {
                    last_moved = Instant::now();
                    if up.pass_on(&mut conversation, upstream, n, drained).is_err() {
                        ending.up_ended(UpEnd::UpstreamClosed);
                    }
                }
                Got::Empty => {}
                Got::Ended => {
                    conversation.note_caller_gone();
                    // As the client's own FIN would: containerd ends the connection, cancelling
                    // what is still in flight, and may still answer what it finished.
                    let _ = upstream.shutdown(std::net::Shutdown::Write);
                    if ending.up_ended(UpEnd::ClientClosed) {
                        break;
                    }
                }
            }
        }
        if ready.containerd && read_containerd && down.wants_read() {
            match down.read(upstream) {
                Got::Bytes { n, .. } if client_gone => {
                    last_moved = Instant::now();
                    down.discard(&mut conversation, n);
                }
                Got::Bytes { n, drained } => {
                    last_moved = Instant::now();
                    let passed = if relay.faults.is_armed() {
                        down.pass_on_checked(&mut conversation, client, n, &relay.faults)
                    } else {
                        down.pass_on(&mut conversation, client, n, drained)
                    };
                    client_gone = passed.is_err();
                }
                Got::Empty => {}
                Got::Ended => {
                    if !client_gone {
                        let _ = client.shutdown(std::net::Shutdown::Write);
                    }
                    break;
                }
            }
        }
        if client_gone {
            down.drop_pending(&mut conversation);
        }
        down.check_hold(&mut conversation);

        if !up.reader().preface_done(&conversation) && Instant::now() >= handshake_deadline {
            metrics.handshake_timeouts.with_label_values(&["cri"]).inc();
            tracing::debug!("no HTTP/2 preface in time; connection closed");
            ending.up_ended(UpEnd::HandshakeTimeout);
            break;
        }
        if ending.due(|| may_close(&conversation, last_moved, goaway_sent)) {
            break;
        }
    }
    // Calls still open when shutdown's grace ran out are cut: their caller never gets the
    // answer, so they are abandoned (a sandbox or container they made shows up undelivered).
    conversation.close(ending.client_left || ending.cut());
}

/// When a connection stopping at `now` is closed at the latest: after `grace`, or at the latest
/// deadline of its open calls (their callers' own bound: kubelet's StopContainer waits out
/// the pod's grace period, RunPodSandbox runs CNI, ExecSync its probe's timeout), but never
/// after `max_grace`.
fn stop_deadline(
    now: Instant,
    latest_call: Option<Instant>,
    grace: Duration,
    max_grace: Duration,
) -> Instant {
    let floor = now + grace;
    let ceiling = now + max_grace.max(grace);
    latest_call.map_or(floor, |d| d.clamp(floor, ceiling))
}

/// Waits until one of `wanted` (those with events) is ready or `wake` passes; which are ready.
/// An interrupted wait returns nothing ready, for the caller to look again.
fn wait(
    wanted: &[(Who, BorrowedFd<'_>, PollFlags); 3],
    wake: Option<Instant>,
) -> nix::Result<Ready> {
    // Only descriptors with events go in the set: poll reports a hang-up whatever the events,
    // and a socket this connection no longer reads may have hung up long ago.
    let mut fds = wanted.map(|(_, fd, events)| PollFd::new(fd, events));
    let mut who = [Who::Stop; 3];
    let mut len = 0;
    for (i, (w, _, events)) in wanted.iter().enumerate() {
        if !events.is_empty() {
            fds.swap(len, i);
            who[len] = *w;
            len += 1;
        }
    }
    let mut ready = Ready::default();
    match poll(&mut fds[..len], timeout_until(wake)) {
        Ok(_) => {}
        Err(Errno::EINTR) => return Ok(ready),
        Err(e) => return Err(e),
    }
    for (fd, w) in fds[..len].iter().zip(who) {
        if fd.revents().is_some_and(|r| !r.is_empty()) {
            match w {
                Who::Client => ready.client = true,
                Who::Containerd => ready.containerd = true,
                Who::Stop => ready.stop = true,
            }
        }
    }
    Ok(ready)
}

/// Which descriptors a wait found ready.
#[derive(Debug, Default, Clone, Copy)]
struct Ready {
    client: bool,
    containerd: bool,
    stop: bool,
}

/// `poll`'s timeout for a wait until `wake`, rounded up to whole milliseconds so that the wait
/// never ends just before it.
fn timeout_until(wake: Option<Instant>) -> PollTimeout {
    let Some(wake) = wake else {
        return PollTimeout::NONE;
    };
    let ms = wake
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000);
    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
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
    /// Shutdown began: the connection is closed by `deadline` at the latest.
    fn stop(&mut self, deadline: Instant) {
        if self.stopping_until.is_none() {
            self.stopping_until = Some(deadline);
        }
    }

    /// Whether shutdown's deadline has passed (what is still open now is cut).
    fn cut(&self) -> bool {
        self.stopping_until.is_some_and(|d| Instant::now() >= d)
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

    /// When to look again with no event: the drain's end, the handshake deadline while no
    /// preface has come, every [`STOP_TICK`] while stopping and every [`HOLD_TICK`] while a
    /// response is held.
    fn wake(&self, handshake: Option<Instant>, held: bool) -> Option<Instant> {
        let now = Instant::now();
        [
            self.drain_until,
            handshake,
            self.stopping_until.map(|_| now + STOP_TICK),
            held.then(|| now + HOLD_TICK),
        ]
        .into_iter()
        .flatten()
        .min()
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
fn may_close(conversation: &Conversation, last_moved: Instant, goaway_sent: bool) -> bool {
    let quiet_for = last_moved.elapsed();
    match conversation.active_streams() {
        Some(open) => goaway_sent && open == 0 && quiet_for >= QUIET_BEFORE_CLOSE,
        None => quiet_for >= QUIET_UNOBSERVED,
    }
}

#[cfg(test)]
mod tests;
