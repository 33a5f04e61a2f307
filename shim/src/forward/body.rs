//! Body wrappers: stream frames through unchanged, tee copies for watched calls, and notice how
//! a call ends (trailers handed to the caller, or the caller gone).
//!
//! A tee is a `Bytes` clone (a reference count), never a copy of the data, and is capped at
//! [`MAX_OBSERVED_BYTES`] per direction.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use parking_lot::Mutex;

use super::call::CallEnd;
use crate::observe::MAX_OBSERVED_BYTES;

/// Teed bytes of one watched call.
#[derive(Debug, Default)]
pub struct Tap {
    state: Mutex<TapState>,
}

#[derive(Debug, Default)]
struct TapState {
    request: Vec<Bytes>,
    request_len: usize,
    response: Vec<Bytes>,
    response_len: usize,
    /// A body exceeded the cap: the call is forwarded but not observed.
    overflow: bool,
}

fn push(chunks: &mut Vec<Bytes>, len: &mut usize, overflow: &mut bool, data: &Bytes) {
    if *overflow {
        return;
    }
    if *len + data.len() > MAX_OBSERVED_BYTES {
        *overflow = true;
        chunks.clear();
        return;
    }
    *len += data.len();
    chunks.push(data.clone());
}

fn concat(chunks: &[Bytes]) -> Bytes {
    match chunks {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => Bytes::from(many.concat()),
    }
}

impl Tap {
    fn push_request(&self, data: &Bytes) {
        let s = &mut *self.state.lock();
        push(&mut s.request, &mut s.request_len, &mut s.overflow, data);
    }

    fn push_response(&self, data: &Bytes) {
        let s = &mut *self.state.lock();
        push(&mut s.response, &mut s.response_len, &mut s.overflow, data);
    }

    /// The request bytes so far (None after an overflow).
    pub fn request(&self) -> Option<Bytes> {
        let s = self.state.lock();
        (!s.overflow).then(|| concat(&s.request))
    }

    /// Request and response bytes (None after an overflow).
    pub fn both(&self) -> Option<(Bytes, Bytes)> {
        let s = self.state.lock();
        (!s.overflow).then(|| (concat(&s.request), concat(&s.response)))
    }
}

/// Called once with the tee when a request body is complete.
pub(super) type OnRequestComplete = Box<dyn FnOnce(&Tap) + Send + Sync>;

/// The request body forwarded upstream.
pub struct RequestBody {
    inner: Incoming,
    tap: Option<Arc<Tap>>,
    /// Called once when the whole request has been read (for requests that are news).
    on_complete: Option<OnRequestComplete>,
}

impl RequestBody {
    /// Wraps the caller's body, teeing into `tap` when set.
    pub fn new(
        inner: Incoming,
        tap: Option<Arc<Tap>>,
        on_complete: Option<OnRequestComplete>,
    ) -> Self {
        Self {
            inner,
            tap,
            on_complete,
        }
    }

    fn complete(&mut self) {
        if let (Some(f), Some(tap)) = (self.on_complete.take(), self.tap.as_ref()) {
            f(tap);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let res = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &res {
            Some(Ok(frame)) => {
                if let (Some(tap), Some(data)) = (&this.tap, frame.data_ref()) {
                    tap.push_request(data);
                }
                // hyper stops polling once the body says it has ended, so completion is
                // detected here rather than by waiting for `None`.
                if this.inner.is_end_stream() {
                    this.complete();
                }
            }
            None => this.complete(),
            Some(Err(_)) => {}
        }
        Poll::Ready(res)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The response body returned to the caller.
pub struct ResponseBody {
    inner: Option<Incoming>,
    end: Option<CallEnd>,
}

impl ResponseBody {
    /// An empty body (trailers-only answers).
    pub fn empty() -> Self {
        Self {
            inner: None,
            end: None,
        }
    }

    /// Streams `inner`; `end` is told how the call ended.
    pub fn new(inner: Incoming, end: CallEnd) -> Self {
        Self {
            inner: Some(inner),
            end: Some(end),
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let res = ready!(Pin::new(&mut *inner).poll_frame(cx));
        match &res {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if let Some(tap) = this.end.as_ref().and_then(CallEnd::tap) {
                        tap.push_response(data);
                    }
                    if inner.is_end_stream() {
                        // Ended without trailers: not gRPC-conformant, status unknown.
                        if let Some(end) = this.end.take() {
                            end.finish(None, true);
                        }
                    }
                } else if let Some(trailers) = frame.trailers_ref()
                    && let Some(end) = this.end.take()
                {
                    end.finish(super::call::grpc_status(trailers), true);
                }
            }
            None => {
                if let Some(end) = this.end.take() {
                    end.finish(None, true);
                }
            }
            Some(Err(_)) => {
                if let Some(end) = this.end.take() {
                    end.finish(None, false);
                }
            }
        }
        Poll::Ready(res)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // The caller went away before the end (reset, hang-up or deadline).
        if let Some(end) = self.end.take() {
            end.abandoned_midway(self.inner.take());
        }
    }
}

/// Reads the rest of an upstream response the caller no longer wants (for mutating calls, whose
/// result the index must learn). Returns the grpc-status from the trailers.
pub(super) async fn drain(mut inner: Incoming, tap: Option<&Tap>) -> Option<i32> {
    use http_body_util::BodyExt;
    while let Some(frame) = inner.frame().await {
        let frame = frame.ok()?;
        if let Some(data) = frame.data_ref() {
            if let Some(tap) = tap {
                tap.push_response(data);
            }
        } else if let Some(trailers) = frame.trailers_ref() {
            return super::call::grpc_status(trailers);
        }
    }
    None
}
