//! One call as its HTTP/2 stream describes it so far: its method, deadline, the bodies kept for
//! a watched call, and how the response is read and ended.

use std::sync::Arc;

use tokio::time::Instant;

use super::digest::Digest;
use super::raw::Body;
use super::unchanged::Reading;
use super::watched::Watched;
use crate::metrics::MethodMetrics;

/// One open call of a connection.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) path: Box<str>,
    pub(super) method: Arc<MethodMetrics>,
    pub(super) watched: Option<Watched>,
    pub(super) started: Instant,
    pub(super) requested_at_ns: i64,
    pub(super) deadline: Option<Instant>,
    pub(super) request: Body,
    pub(super) response: Body,
    /// The response's length, kept or not.
    pub(super) response_len: usize,
    /// A List/Status call: the digest of its request, once the request is complete.
    pub(super) request_key: Option<u64>,
    /// A List/Status call: the digest of its answer so far.
    pub(super) answer: Option<Box<Digest>>,
    /// How much of the response is read: digested and kept for the decoder, digested only, or
    /// not at all (see `observe/unchanged.rs`).
    pub(super) reading: Reading,
    /// A body passed the bound on one observed message: the call is counted but not observed.
    pub(super) overflow: bool,
    pub(super) response_done: bool,
    pub(super) status: Option<i32>,
    /// `grpc-message` of a failed call, as far as the reader keeps it (for the log).
    pub(super) message: Option<String>,
    pub(super) caller_reset: bool,
}

impl Stream {
    /// A call just opened on `path` at `started` (`requested_at_ns` by the recorder's clock).
    pub(super) fn new(
        path: String,
        method: Arc<MethodMetrics>,
        started: Instant,
        requested_at_ns: i64,
        deadline: Option<Instant>,
        answer: Option<Box<Digest>>,
    ) -> Self {
        Self {
            watched: Watched::from_path(&path),
            path: path.into_boxed_str(),
            method,
            started,
            requested_at_ns,
            deadline,
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
        }
    }
}
