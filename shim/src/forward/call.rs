//! The end of one forwarded call: metrics, the debug request log, and the raw observation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use hyper::body::Incoming;
use parking_lot::Mutex;
use prometheus::{Histogram, IntCounter};
use tokio::time::Instant;

use super::body::{Tap, drain};
use crate::metrics::Metrics;
use crate::observe::{Observer, Outcome, Raw, Watched};

/// Distinct method labels kept before new paths are folded into `other`: paths come from
/// callers, and a hostile one must not grow the metrics without bound.
const MAX_METHOD_LABELS: usize = 256;

/// gRPC `CANCELLED`, recorded when the caller went away.
const CANCELLED: i32 = 1;

/// The `grpc-status` of a header or trailer map.
pub fn grpc_status(h: &HeaderMap) -> Option<i32> {
    h.get("grpc-status")?.to_str().ok()?.trim().parse().ok()
}

/// Parses a `grpc-timeout` header (`<digits><unit>`, unit one of H M S m u n).
pub fn grpc_timeout(h: &HeaderMap) -> Option<Duration> {
    let v = h.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Per-method metric handles, resolved once per method rather than per call.
pub struct MethodMetrics {
    /// The method label (the path, or `other`).
    pub label: Arc<str>,
    /// `podward_shim_requests_total{method}`.
    pub requests: IntCounter,
    /// `podward_shim_request_duration_seconds{method}`.
    pub duration: Histogram,
}

/// Method label table with bounded cardinality.
pub(super) struct MethodTable {
    metrics: Metrics,
    table: Mutex<HashMap<String, Arc<MethodMetrics>>>,
}

impl MethodTable {
    /// An empty table.
    pub(super) fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// The handles for `path`.
    pub(super) fn get(&self, path: &str) -> Arc<MethodMetrics> {
        let mut t = self.table.lock();
        if let Some(m) = t.get(path) {
            return m.clone();
        }
        let key = if t.len() >= MAX_METHOD_LABELS {
            "other"
        } else {
            path
        };
        if let Some(m) = t.get(key) {
            return m.clone();
        }
        let m = Arc::new(MethodMetrics {
            label: key.into(),
            requests: self.metrics.requests.with_label_values(&[key]),
            duration: self.metrics.request_duration.with_label_values(&[key]),
        });
        t.insert(key.to_owned(), m.clone());
        m
    }
}

/// Everything needed to close the books on one call.
pub struct CallEnd {
    /// Method metrics.
    pub method: Arc<MethodMetrics>,
    /// Shim metrics (error counter).
    pub metrics: Metrics,
    /// The watched method and its tee, if observed.
    pub watched: Option<(Watched, Arc<Tap>)>,
    /// Where raw observations go.
    pub observer: Observer,
    /// When the request headers arrived.
    pub started: Instant,
    /// The caller's deadline (from `grpc-timeout`).
    pub deadline: Option<Instant>,
    /// Unix ns of the request.
    pub requested_at_ns: i64,
    /// Wall clock.
    pub clock: fn() -> i64,
}

impl CallEnd {
    /// The tee, if this call is observed.
    pub fn tap(&self) -> Option<&Tap> {
        self.watched.as_ref().map(|(_, t)| &**t)
    }

    /// The call ended with `status`; `handed_over` says whether the last frame went to the
    /// caller. A response handed over after the caller's deadline is not delivered either: the
    /// caller has stopped listening.
    pub fn finish(self, status: Option<i32>, handed_over: bool) {
        let delivered = handed_over && self.deadline.is_none_or(|d| Instant::now() <= d);
        let outcome = if delivered {
            Outcome::Delivered
        } else {
            Outcome::Undelivered
        };
        self.close(status, outcome);
    }

    /// The caller left after the response headers but before its end. For mutating calls the
    /// rest of the answer is still read (it says what containerd did); others are cancelled.
    pub fn abandoned_midway(self, inner: Option<Incoming>) {
        match (inner, &self.watched) {
            (Some(inner), Some((w, _))) if w.is_mutating() => {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let status = drain(inner, self.tap()).await;
                        self.close(status, Outcome::Undelivered);
                    });
                } else {
                    self.close(None, Outcome::Undelivered);
                }
            }
            _ => self.close(None, Outcome::Undelivered),
        }
    }

    /// The caller left before containerd answered; the upstream call was cancelled with it.
    pub fn abandoned_before_answer(self) {
        self.close(None, Outcome::Abandoned);
    }

    fn close(self, status: Option<i32>, outcome: Outcome) {
        let elapsed = self.started.elapsed();
        self.method.duration.observe(elapsed.as_secs_f64());
        let code = if outcome == Outcome::Delivered {
            status.unwrap_or(2)
        } else {
            CANCELLED
        };
        if code != 0 {
            let name = format!("{:?}", tonic::Code::from(code));
            self.metrics
                .request_errors
                .with_label_values(&[&*self.method.label, &name])
                .inc();
        }
        tracing::debug!(
            method = %self.method.label,
            duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            grpc_status = code,
            upstream_status = status,
            "request"
        );
        let Some((method, tap)) = self.watched else {
            return;
        };
        let Some((request, response)) = tap.both() else {
            return;
        };
        self.observer.send(Raw::Call {
            method,
            request,
            response,
            grpc_status: status,
            outcome,
            requested_at_ns: self.requested_at_ns,
            completed_at_ns: (self.clock)(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        let mut h = HeaderMap::new();
        for (v, want) in [
            ("2S", Some(Duration::from_secs(2))),
            ("150m", Some(Duration::from_millis(150))),
            ("1H", Some(Duration::from_secs(3600))),
            ("7u", Some(Duration::from_micros(7))),
            ("S", None),
            ("12x", None),
            ("123456789S", None),
        ] {
            h.insert("grpc-timeout", v.parse().expect("header"));
            assert_eq!(grpc_timeout(&h), want, "{v}");
        }
    }

    #[test]
    fn method_labels_are_bounded() {
        let t = MethodTable::new(Metrics::unregistered());
        for i in 0..(MAX_METHOD_LABELS + 10) {
            t.get(&format!("/x/{i}"));
        }
        assert_eq!(&*t.get("/x/99999").label, "other");
        assert_eq!(&*t.get("/x/1").label, "/x/1");
    }
}
