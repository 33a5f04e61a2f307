//! The calls of one connection as its HTTP/2 streams describe them: stream ID → call (method,
//! deadline, the bodies of watched calls, how the call ended), within the bounds on what one
//! connection may hold. Finished calls go to the [`Recorder`].

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use foldhash::HashMap;
use tokio::time::Instant;

use super::digest::Digest;
use super::grpc_headers::Fields;
use super::raw::{Body, Outcome};
use super::recorder::Recorder;
use super::stream::Stream;
use super::unchanged::Reading;
use super::watched::Watched;
use crate::h2read::FrameError;

/// Largest body kept per direction of one watched call: one CRI message at containerd's own
/// limit, with its 5-byte gRPC prefix. A bigger one is relayed but not observed.
pub(crate) const MAX_OBSERVED_BYTES: usize = podward_api::limits::CRI_MESSAGE_BYTES + 5;

/// Observed bytes one connection may hold at once (many large watched calls in flight); a call
/// whose body would pass it is relayed unobserved (counted, and the index relisted), and the
/// connection's next calls are observed as usual.
const MAX_CONNECTION_BYTES: usize = 64 << 20;

/// Open streams tracked per connection; past it the connection is no longer observed.
const MAX_STREAMS: usize = 4096;

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
            let method = self.recorder.method(&path);
            method.requests.inc();
            let started = Instant::now();
            let digests = self.recorder.digests();
            let answer = Watched::from_path(&path)
                .filter(|w| !w.is_mutating())
                .map(|w| match self.spare.take() {
                    Some(mut d) => {
                        digests.restart(&mut d, w);
                        d
                    }
                    None => Box::new(digests.answer(w)),
                });
            let deadline = fields.grpc_timeout.and_then(|t| started.checked_add(t));
            let stream = Stream::new(
                path,
                method,
                started,
                self.recorder.now_ns(),
                deadline,
                answer,
            );
            self.streams.insert(id, stream);
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
            s.request_key = self.recorder.digests().request(w, &s.request);
            s.reading = s
                .request_key
                .map_or(Reading::Keep, |k| self.recorder.reading(w, k));
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
            self.recorder
                .request_is_in(w, s.request.clone(), s.requested_at_ns);
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
        self.recorder.record(s, answer.as_deref(), outcome);
        if answer.is_some() {
            self.spare = answer;
        }
    }
}

/// gRPC `UNAVAILABLE`: the server went away or refused the stream.
const UNAVAILABLE: i32 = 14;
