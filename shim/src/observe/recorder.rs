//! Where every connection's finished calls go: the per-method metrics and log line, the check
//! for an unchanged repeat of a List/Status answer, and, for the watched methods, the observer
//! (decoded later, off the relay path).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::digest::{Digest, Digester};
use super::observer::Observer;
use super::raw::{Body, Outcome, Raw};
use super::stream::Stream;
use super::unchanged::{Reading, Unchanged, Verdict};
use super::watched::Watched;
use crate::metrics::{MethodMetrics, MethodTable, Metrics};
use crate::runtime::heal::Blindness;

/// gRPC `CANCELLED`, recorded when the caller went away.
const CANCELLED: i32 = 1;

/// gRPC `UNKNOWN`: the stream ended without a `grpc-status`.
const UNKNOWN: i32 = 2;

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
    pub fn blindness(&self) -> &Arc<Blindness> {
        self.observer.blindness()
    }

    /// The metrics of the method on `path`.
    pub(super) fn method(&self, path: &str) -> Arc<MethodMetrics> {
        self.methods.get(path)
    }

    /// The process's answer digests.
    pub(super) fn digests(&self) -> &Digester {
        &self.digests
    }

    /// Now, by the recorder's clock (Unix ns).
    pub(super) fn now_ns(&self) -> i64 {
        (self.clock)()
    }

    /// How much of the answer to the List/Status request digested as `key` to read.
    pub(super) fn reading(&self, method: Watched, key: u64) -> Reading {
        let now = std::time::Instant::now();
        let removals = self.observer.removals();
        let mut unchanged = self.unchanged.lock();
        unchanged.follow(removals);
        unchanged.reading(method, key, now)
    }

    /// The request of a [`Watched::request_is_news`] call is complete.
    pub(super) fn request_is_in(&self, method: Watched, body: Body, at_ns: i64) {
        self.observer.send(Raw::Request {
            method,
            body,
            at_ns,
        });
    }

    /// One call relayed but not observed: counted, and the index relisted.
    pub(super) fn skipped(&self, why: &'static str) {
        tracing::debug!(why, "a CRI call is relayed unobserved; relisting");
        self.metrics.observations_dropped.inc();
        self.blindness().call_lost();
    }

    /// A finished call, its answer's digest apart.
    pub(super) fn record(&self, s: Stream, answer: Option<&Digest>, outcome: Outcome) {
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
            self.metrics
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
            self.skipped("a watched call's body past the bound on what is held");
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
            self.metrics.compressed_skipped.inc();
            self.blindness().call_lost();
            return;
        }
        if s.reading == Reading::Unread {
            self.metrics.answers_unread.inc();
            return;
        }
        let repeat_key = s.request_key.filter(|_| s.status == Some(0));
        if let Some(key) = repeat_key {
            let answer = answer.and_then(Digest::finish);
            let kept = s.reading == Reading::Keep;
            let removals = self.observer.removals();
            let mut unchanged = self.unchanged.lock();
            unchanged.follow(removals);
            let verdict =
                unchanged.settle(method, key, answer, s.response_len, kept, now.into_std());
            drop(unchanged);
            match verdict {
                Verdict::Repeat => {
                    self.metrics.answers_unchanged.inc();
                    return;
                }
                Verdict::Missed => {
                    self.metrics.answers_deferred.inc();
                    return;
                }
                Verdict::News => {}
            }
        }
        let sent = self.observer.send(Raw::Call {
            method,
            request: s.request,
            response: s.response,
            grpc_status: s.status,
            outcome,
            requested_at_ns: s.requested_at_ns,
            completed_at_ns: self.now_ns(),
        });
        if !sent && let Some(key) = repeat_key {
            self.unchanged.lock().forget(method, key);
        }
    }
}
