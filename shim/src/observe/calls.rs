//! The calls of one connection as its HTTP/2 streams describe them: stream ID → method, deadline, the
//! bodies of watched calls, how the call ended. Finished calls go to the metrics and, for the
//! watched methods, to the observer (decoded later, off the relay path).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use foldhash::HashMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::grpc_headers::Fields;
use super::{Body, Digest, Digester, Observer, Outcome, Raw, Reading, Unchanged, Verdict, Watched};
use crate::h2read::FrameError;
use crate::metrics::{MethodMetrics, MethodTable, Metrics};

/// Largest body kept per direction of one watched call: one CRI message at containerd's own
/// limit, with its 5-byte gRPC prefix. A bigger one is relayed but not observed.
pub(crate) const MAX_OBSERVED_BYTES: usize = podward_api::limits::CRI_MESSAGE_BYTES + 5;

/// Observed bytes one connection may hold at once (many large watched calls in flight); a call
/// whose body would pass it is relayed unobserved (counted, and the index relisted), and the
/// connection's next calls are observed as usual.
const MAX_CONNECTION_BYTES: usize = 64 << 20;

/// Open streams tracked per connection; past it the connection is no longer observed.
const MAX_STREAMS: usize = 4096;

/// gRPC `CANCELLED`, recorded when the caller went away.
const CANCELLED: i32 = 1;

/// Where every connection's finished calls go.
pub struct Recorder {
    methods: MethodTable,
    metrics: Metrics,
    observer: Observer,
    /// The process's answer digests (immutable: no lock).
    digests: Digester,
    /// Shared by every connection: kubelet's relists come on whichever connection it has.
    unchanged: Mutex<Unchanged>,
    clock: fn() -> i64,
}

impl Recorder {
    /// A recorder counting into `metrics` and sending watched calls to `observer`.
    pub fn new(metrics: Metrics, observer: Observer, clock: fn() -> i64) -> Self {
        Self {
            methods: MethodTable::new(metrics.clone()),
            metrics,
            observer,
            digests: Digester::default(),
            unchanged: Mutex::new(Unchanged::default()),
            clock,
        }
    }

    /// The shim's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Reads a large List/Status answer that keeps repeating at most every `interval` per
    /// request (see `observe/unchanged.rs`; zero reads every one).
    #[must_use]
    pub fn read_repeats_every(self, interval: std::time::Duration) -> Self {
        self.unchanged.lock().set_read_interval(interval);
        self
    }

    /// Where losses of observation are reported (the index heals from them).
    pub fn blindness(&self) -> &Arc<crate::heal::Blindness> {
        self.observer.blindness()
    }

    /// One call relayed but not observed: counted, and the index relisted.
    fn skipped(&self, why: &'static str) {
        tracing::debug!(why, "a CRI call is relayed unobserved; relisting");
        self.metrics.observations_dropped.inc();
        self.blindness().call_lost();
    }
}

#[derive(Debug)]
struct Stream {
    path: Box<str>,
    method: Arc<MethodMetrics>,
    watched: Option<Watched>,
    started: Instant,
    requested_at_ns: i64,
    deadline: Option<Instant>,
    request: Body,
    response: Body,
    /// The response's length, kept or not.
    response_len: usize,
    /// A List/Status call: the digest of its request, once the request is complete.
    request_key: Option<u64>,
    /// A List/Status call: the digest of its answer so far.
    answer: Option<Box<Digest>>,
    /// How much of the response is read: digested and kept for the decoder, digested only, or
    /// not at all (see `observe/unchanged.rs`).
    reading: Reading,
    /// A body passed [`MAX_OBSERVED_BYTES`]: the call is counted but not observed.
    overflow: bool,
    response_done: bool,
    status: Option<i32>,
    /// `grpc-message` of a failed call, as far as the reader keeps it (for the log).
    message: Option<String>,
    caller_reset: bool,
}

/// One connection's calls.
pub(crate) struct Calls {
    streams: HashMap<u32, Stream>,
    buffered: usize,
    recorder: Arc<Recorder>,
    /// The last finished call's answer digest, restarted for the next List/Status call rather
    /// than a new one allocated for each.
    spare: Option<Box<Digest>>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("streams", &self.streams.len())
            .field("buffered", &self.buffered)
            .finish()
    }
}

/// A kept DATA part, copied out of the relay's read buffer: a slice would keep the whole buffer
/// (up to the read size, whatever the part's length) alive until the call is decoded, so the
/// memory a call holds would be the buffers it touched, not its body. Only the watched calls'
/// bodies that are news are kept (an unchanged relist is digested in place, not copied).
fn part(chunk: &[u8], range: Range<usize>) -> Bytes {
    Bytes::copy_from_slice(&chunk[range])
}

impl Calls {
    pub(crate) fn new(recorder: Arc<Recorder>) -> Self {
        Self {
            streams: HashMap::default(),
            buffered: 0,
            recorder,
            spare: None,
        }
    }

    /// Streams still open.
    pub(crate) fn active(&self) -> usize {
        self.streams.len()
    }

    /// The latest deadline (`grpc-timeout`) of the open calls; `None` when none has one.
    pub(crate) fn latest_deadline(&self) -> Option<Instant> {
        self.streams.values().filter_map(|s| s.deadline).max()
    }

    /// Where this connection's calls go.
    pub(crate) fn recorder(&self) -> Arc<Recorder> {
        self.recorder.clone()
    }

    /// The `:path` of an open stream.
    pub(crate) fn path(&self, id: u32) -> Option<&str> {
        self.streams.get(&id).map(|s| &*s.path)
    }

    /// A header block from the client.
    pub(crate) fn request_headers(
        &mut self,
        id: u32,
        fields: Fields,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        if !self.streams.contains_key(&id) {
            if self.streams.len() >= MAX_STREAMS {
                // Not followed: its frames find no call and pass. The next stream opened once
                // some have ended is.
                self.recorder
                    .skipped("too many open streams on the connection");
                return Ok(());
            }
            let path = fields.path.unwrap_or_default();
            let method = self.recorder.methods.get(&path);
            method.requests.inc();
            let started = Instant::now();
            let watched = Watched::from_path(&path);
            let digests = &self.recorder.digests;
            let answer = watched
                .filter(|w| !w.is_mutating())
                .map(|w| match self.spare.take() {
                    Some(mut d) => {
                        digests.restart(&mut d, w);
                        d
                    }
                    None => Box::new(digests.answer(w)),
                });
            self.streams.insert(
                id,
                Stream {
                    watched,
                    path: path.into_boxed_str(),
                    method,
                    started,
                    requested_at_ns: (self.recorder.clock)(),
                    deadline: fields.grpc_timeout.and_then(|t| started.checked_add(t)),
                    request: Body::default(),
                    response: Body::default(),
                    response_len: 0,
                    request_key: None,
                    answer,
                    reading: Reading::Keep,
                    overflow: false,
                    response_done: false,
                    status: None,
                    message: None,
                    caller_reset: false,
                },
            );
        }
        if end_stream {
            self.request_ended(id);
        }
        Ok(())
    }

    /// Part of a request body.
    pub(crate) fn request_data(
        &mut self,
        id: u32,
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        self.keep(id, chunk, range, true)?;
        if end_stream {
            self.request_ended(id);
        }
        Ok(())
    }

    fn request_ended(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if let Some(w) = s.watched.filter(|w| !w.is_mutating())
            && !s.overflow
        {
            s.request_key = self.recorder.digests.request(w, &s.request);
            s.reading = s.request_key.map_or(Reading::Keep, |k| {
                let now = std::time::Instant::now();
                let removals = self.recorder.observer.removals();
                let mut unchanged = self.recorder.unchanged.lock();
                unchanged.follow(removals);
                unchanged.reading(w, k, now)
            });
            if s.reading == Reading::Unread {
                // No digest to feed: the next List/Status call takes it.
                self.spare = s.answer.take().or(self.spare.take());
            }
        }
        // A stop request is news the moment kubelet decides it, long before the answer
        // (which can take the whole grace period).
        if let Some(w) = s.watched.filter(|w| w.request_is_news())
            && !s.overflow
        {
            self.recorder.observer.send(Raw::Request {
                method: w,
                body: s.request.clone(),
                at_ns: s.requested_at_ns,
            });
        }
    }

    /// Keeps a body part of a watched call.
    fn keep(
        &mut self,
        id: u32,
        chunk: &[u8],
        range: Range<usize>,
        request: bool,
    ) -> Result<(), FrameError> {
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if s.watched.is_none() || s.overflow || range.is_empty() {
            return Ok(());
        }
        let len = if request {
            s.request.len()
        } else {
            s.response_len
        };
        // Past one CRI message, or past what the connection may hold: this call is given up
        // (counted and relisted when it ends), the others go on.
        let kept = if s.reading == Reading::Keep || request {
            range.len()
        } else {
            0
        };
        if len + range.len() > MAX_OBSERVED_BYTES || self.buffered + kept > MAX_CONNECTION_BYTES {
            self.buffered -= s.request.len() + s.response.len();
            s.overflow = true;
            s.request = Body::default();
            s.response = Body::default();
            s.answer = None;
            return Ok(());
        }
        let body = if request {
            &mut s.request
        } else {
            // Digested here, while the bytes are in cache on their way through.
            s.response_len += range.len();
            if let Some(d) = s.answer.as_mut() {
                d.feed(&chunk[range.clone()]);
            }
            if s.reading != Reading::Keep {
                return Ok(());
            }
            &mut s.response
        };
        self.buffered += range.len();
        body.push(part(chunk, range));
        Ok(())
    }

    /// The client reset a stream. Returns nothing: a call whose answer is complete but not yet
    /// handed over is settled by [`Calls::settle`], which then sees the reset.
    pub(crate) fn caller_reset(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.response_done {
            s.caller_reset = true;
        } else if let Some(s) = self.remove(id) {
            self.finish(s, Outcome::Abandoned);
        }
    }

    /// A header block from the server. Returns true when it ends the call (the call is then
    /// settled once the bytes are handed over).
    pub(crate) fn response_headers(&mut self, id: u32, fields: Fields, end_stream: bool) -> bool {
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        if fields.grpc_status.is_some() {
            s.status = fields.grpc_status;
        }
        if fields.grpc_message.is_some() {
            s.message = fields.grpc_message;
        }
        if end_stream {
            s.response_done = true;
        }
        end_stream
    }

    /// Part of a response body; true when it ends the call.
    pub(crate) fn response_data(
        &mut self,
        id: u32,
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<bool, FrameError> {
        self.keep(id, chunk, range, false)?;
        if end_stream && let Some(s) = self.streams.get_mut(&id) {
            s.response_done = true;
            return Ok(true);
        }
        Ok(false)
    }

    /// The server reset a stream: the call failed.
    pub(crate) fn server_reset(&mut self, id: u32) {
        if let Some(mut s) = self.remove(id) {
            s.status = None;
            self.finish(s, Outcome::Delivered);
        }
    }

    /// The server will not serve streams above `last`: they failed, and the client retries them
    /// elsewhere.
    pub(crate) fn server_goaway(&mut self, last: u32) {
        let refused: Vec<u32> = self
            .streams
            .keys()
            .copied()
            .filter(|&id| id > last)
            .collect();
        for id in refused {
            if let Some(mut s) = self.remove(id) {
                s.status = Some(UNAVAILABLE);
                self.finish(s, Outcome::Delivered);
            }
        }
    }

    /// A call whose end was read from the server has been handed to the client (or not).
    pub(crate) fn settle(&mut self, id: u32, handed_over: bool) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if !s.response_done {
            return;
        }
        let Some(s) = self.remove(id) else { return };
        let in_time = s.deadline.is_none_or(|d| Instant::now() <= d);
        let outcome = if handed_over && in_time && !s.caller_reset {
            Outcome::Delivered
        } else {
            Outcome::Undelivered
        };
        self.finish(s, outcome);
    }

    /// The connection ended: every open call ends with it. `client_left` says whose side went
    /// first (the client's: the calls were abandoned; containerd's: they failed).
    pub(crate) fn close(&mut self, client_left: bool) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            let Some(mut s) = self.remove(id) else {
                continue;
            };
            if s.response_done {
                // Read, never handed over.
                self.finish(s, Outcome::Undelivered);
            } else if client_left {
                self.finish(s, Outcome::Abandoned);
            } else {
                s.status = Some(UNAVAILABLE);
                self.finish(s, Outcome::Delivered);
            }
        }
    }

    fn remove(&mut self, id: u32) -> Option<Stream> {
        let s = self.streams.remove(&id)?;
        self.buffered -= s.request.len() + s.response.len();
        Some(s)
    }

    fn finish(&mut self, mut s: Stream, outcome: Outcome) {
        let answer = s.answer.take();
        self.record(s, answer.as_deref(), outcome);
        if answer.is_some() {
            self.spare = answer;
        }
    }

    /// A finished call, its answer's digest apart.
    fn record(&self, s: Stream, answer: Option<&Digest>, outcome: Outcome) {
        let r = &self.recorder;
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(s.started);
        s.method.duration.observe(elapsed.as_secs_f64());
        let code = if outcome == Outcome::Delivered {
            s.status.unwrap_or(UNKNOWN)
        } else {
            CANCELLED
        };
        if code != 0 {
            let name = format!("{:?}", tonic::Code::from(code));
            r.metrics
                .request_errors
                .with_label_values(&[&*s.method.label, &name])
                .inc();
        }
        tracing::debug!(
            method = %s.method.label,
            duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            grpc_status = code,
            upstream_status = s.status,
            grpc_message = s.message.as_deref(),
            "request"
        );
        if s.watched.is_some() && s.overflow {
            r.skipped("a watched call's body past the bound on what is held");
            return;
        }
        let Some(method) = s.watched else {
            return;
        };
        if s.request.is_compressed()
            || s.response.is_compressed()
            || answer.is_some_and(Digest::compressed)
        {
            // kubelet never compresses CRI messages; a client that does is relayed, not read
            // (what it changed reaches the index by a relist).
            r.metrics.compressed_skipped.inc();
            r.blindness().call_lost();
            return;
        }
        if s.reading == Reading::Unread {
            r.metrics.answers_unread.inc();
            return;
        }
        let repeat_key = s.request_key.filter(|_| s.status == Some(0));
        if let Some(key) = repeat_key {
            let answer = answer.and_then(Digest::finish);
            let kept = s.reading == Reading::Keep;
            let removals = r.observer.removals();
            let mut unchanged = r.unchanged.lock();
            unchanged.follow(removals);
            let verdict =
                unchanged.settle(method, key, answer, s.response_len, kept, now.into_std());
            drop(unchanged);
            match verdict {
                Verdict::Repeat => {
                    r.metrics.answers_unchanged.inc();
                    return;
                }
                Verdict::Missed => {
                    r.metrics.answers_deferred.inc();
                    return;
                }
                Verdict::News => {}
            }
        }
        let sent = r.observer.send(Raw::Call {
            method,
            request: s.request,
            response: s.response,
            grpc_status: s.status,
            outcome,
            requested_at_ns: s.requested_at_ns,
            completed_at_ns: (r.clock)(),
        });
        if !sent && let Some(key) = repeat_key {
            r.unchanged.lock().forget(method, key);
        }
    }
}

/// gRPC `UNAVAILABLE`: the server went away or refused the stream.
const UNAVAILABLE: i32 = 14;
/// gRPC `UNKNOWN`: the stream ended without a `grpc-status`.
const UNKNOWN: i32 = 2;
