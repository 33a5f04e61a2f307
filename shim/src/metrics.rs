//! The shim's Prometheus metrics, registered on the admin endpoint's registry.

use std::sync::Arc;

use foldhash::HashMap;
use parking_lot::Mutex;
use podward_api::daemon::metrics::MetricsError;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

/// Every metric the shim exports. Cheap to clone (the collectors are reference-counted).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Relayed requests by gRPC method path.
    pub requests: IntCounterVec,
    /// Relayed requests that ended with a non-OK gRPC status, by method and code.
    pub request_errors: IntCounterVec,
    /// Time from request headers to the end of the response, by method.
    pub request_duration: HistogramVec,
    /// Sandboxes in the index.
    pub index_sandboxes: IntGauge,
    /// Containers in the index.
    pub index_containers: IntGauge,
    /// Connected Watch subscribers.
    pub subscribers: IntGauge,
    /// Resync snapshots sent to subscribers that fell behind.
    pub resyncs: IntCounter,
    /// 1 while the upstream HTTP/2 connection to containerd is up.
    pub upstream_connected: IntGauge,
    /// Mutating calls whose successful result never reached the caller.
    pub undelivered: IntCounter,
    /// Observations dropped because the decoder queue was full (in calls or bytes) or the
    /// decoder failed on one; each wakes a relist that puts the index right.
    pub observations_dropped: IntCounter,
    /// Connections whose HTTP/2 the reader could not follow (relayed on, no longer observed).
    pub observe_errors: IntCounter,
    /// Watched calls not observed because a message was compressed.
    pub compressed_skipped: IntCounter,
    /// List/Status answers with the same content as the previous answer to the same request
    /// (recognised while relayed, not decoded).
    pub answers_unchanged: IntCounter,
    /// Large List/Status answers relayed without being kept (the previous one repeated) that
    /// turned out changed: not decoded; the next answer to the same request is.
    pub answers_deferred: IntCounter,
    /// Large List/Status answers relayed unread: the same request's answer was read, and was a
    /// repeat, less than a read interval before.
    pub answers_unread: IntCounter,
    /// Bytes relayed, by direction (`to_containerd`, `to_client`).
    pub relayed_bytes: IntCounterVec,
    /// Open client connections on the CRI socket.
    pub connections: IntGauge,
    /// Connections closed because the client sent no HTTP/2 preface in time, by socket.
    pub handshake_timeouts: IntCounterVec,
    /// Watch calls refused because `--max-subscribers` were already connected.
    pub watch_rejected: IntCounter,
    /// CRI connections answered `UNAVAILABLE` because `--max-connections` were being relayed.
    pub connections_refused: IntCounter,
    /// CRI message fields repaired (invalid UTF-8 replaced) or dropped to decode the rest, by
    /// action.
    pub cri_repairs: IntCounterVec,
    /// Open client connections whose HTTP/2 is no longer observed (the index is healed by
    /// relists while this is above 0).
    pub unobserved_connections: IntGauge,
    /// Relists from containerd made to heal the index after a loss of observation, by result.
    pub relists: IntCounterVec,
    /// Bytes of call bodies waiting in the decoder's queue.
    pub decoder_queue_bytes: IntGauge,
    /// Objects read with a kept field past its bound (marked truncated), by kind.
    pub index_truncated: IntCounterVec,
}

impl Metrics {
    /// Creates the metrics and registers them on `registry`.
    // One function on purpose: one block per family (name, help, labels, buckets), in the order
    // of the struct's fields; split, the list would only be spread over more places.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let requests = IntCounterVec::new(
            Opts::new(
                "podward_shim_requests_total",
                "CRI requests relayed, by method",
            ),
            &["method"],
        )?;
        let request_errors = IntCounterVec::new(
            Opts::new(
                "podward_shim_request_errors_total",
                "Relayed requests that ended with a non-OK gRPC status, by method and code",
            ),
            &["method", "code"],
        )?;
        // Buckets from 50 µs (the shim's own overhead) to minutes (RunPodSandbox, PullImage).
        let buckets = vec![
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
        ];
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "podward_shim_request_duration_seconds",
                "Duration of relayed requests (headers in to end of response), by method",
            )
            .buckets(buckets),
            &["method"],
        )?;
        let index_sandboxes = IntGauge::new(
            "podward_shim_index_sandboxes",
            "Sandboxes in the lifecycle index",
        )?;
        let index_containers = IntGauge::new(
            "podward_shim_index_containers",
            "Containers in the lifecycle index",
        )?;
        let subscribers = IntGauge::new("podward_shim_subscribers", "Connected Watch subscribers")?;
        let resyncs = IntCounter::new(
            "podward_shim_resyncs_total",
            "Resync snapshots sent to Watch subscribers that fell behind",
        )?;
        let upstream_connected = IntGauge::new(
            "podward_shim_upstream_connected",
            "1 while the HTTP/2 connection to containerd is up, else 0",
        )?;
        let undelivered = IntCounter::new(
            "podward_shim_undelivered_total",
            "Mutating CRI calls that containerd completed but whose result never reached the caller",
        )?;
        let observations_dropped = IntCounter::new(
            "podward_shim_observations_dropped_total",
            "Observed calls not decoded because the decoder queue was full or the decoder failed on \
             them (each wakes a relist)",
        )?;
        let observe_errors = IntCounter::new(
            "podward_shim_observe_errors_total",
            "CRI connections whose HTTP/2 could not be followed; relayed unchanged, no longer observed",
        )?;
        let compressed_skipped = IntCounter::new(
            "podward_shim_compressed_messages_total",
            "Watched calls not observed because a message was compressed",
        )?;
        let answers_unchanged = IntCounter::new(
            "podward_shim_answers_unchanged_total",
            "List/Status answers identical in content to the previous answer to the same request, \
             not decoded",
        )?;
        let answers_deferred = IntCounter::new(
            "podward_shim_answers_deferred_total",
            "Large List/Status answers not kept (the previous one was a repeat) that turned out \
             changed; the next answer to the same request is decoded",
        )?;
        let answers_unread = IntCounter::new(
            "podward_shim_answers_unread_total",
            "Large List/Status answers relayed unread: the previous answer to the same request \
             repeated and was read less than 250 ms before",
        )?;
        let relayed_bytes = IntCounterVec::new(
            Opts::new(
                "podward_shim_relayed_bytes_total",
                "Bytes relayed between CRI clients and containerd, by direction",
            ),
            &["direction"],
        )?;
        let connections = IntGauge::new(
            "podward_shim_connections",
            "Open client connections on the CRI socket (each has its own connection to containerd)",
        )?;
        let handshake_timeouts = IntCounterVec::new(
            Opts::new(
                "podward_shim_handshake_timeouts_total",
                "Connections closed because the client sent no HTTP/2 preface within --handshake-timeout, by socket",
            ),
            &["socket"],
        )?;
        let watch_rejected = IntCounter::new(
            "podward_shim_watch_rejected_total",
            "Watch calls refused because --max-subscribers were already connected",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_errors.clone()))?;
        registry.register(Box::new(request_duration.clone()))?;
        registry.register(Box::new(index_sandboxes.clone()))?;
        registry.register(Box::new(index_containers.clone()))?;
        registry.register(Box::new(subscribers.clone()))?;
        registry.register(Box::new(resyncs.clone()))?;
        registry.register(Box::new(upstream_connected.clone()))?;
        registry.register(Box::new(undelivered.clone()))?;
        registry.register(Box::new(observations_dropped.clone()))?;
        registry.register(Box::new(observe_errors.clone()))?;
        registry.register(Box::new(compressed_skipped.clone()))?;
        registry.register(Box::new(answers_unchanged.clone()))?;
        registry.register(Box::new(answers_deferred.clone()))?;
        registry.register(Box::new(answers_unread.clone()))?;
        registry.register(Box::new(relayed_bytes.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(handshake_timeouts.clone()))?;
        let cri_repairs = IntCounterVec::new(
            Opts::new(
                "podward_shim_cri_repairs_total",
                "CRI message fields with invalid UTF-8 that were repaired (action=replaced) or left out (action=dropped) so that the rest of the message decodes",
            ),
            &["action"],
        )?;
        let connections_refused = IntCounter::new(
            "podward_shim_connections_refused_total",
            "CRI connections answered UNAVAILABLE because --max-connections were already relayed",
        )?;
        registry.register(Box::new(watch_rejected.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        registry.register(Box::new(cri_repairs.clone()))?;
        let index_truncated = IntCounterVec::new(
            Opts::new(
                "podward_shim_index_truncated_total",
                "Sandboxes and containers read with a kept field (a label, an annotation, an environment variable a probe references) past its bound; published with truncated = true, without that field",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(index_truncated.clone()))?;
        let unobserved_connections = IntGauge::new(
            "podward_shim_unobserved_connections",
            "Open CRI connections no longer observed; the index is healed by relisting from \
             containerd while this is above 0",
        )?;
        let relists = IntCounterVec::new(
            Opts::new(
                "podward_shim_relists_total",
                "Relists from containerd made to heal the index after a loss of observation, by \
                 result (ok, error)",
            ),
            &["result"],
        )?;
        let decoder_queue_bytes = IntGauge::new(
            "podward_shim_decoder_queue_bytes",
            "Bytes of observed call bodies waiting for the decoder",
        )?;
        registry.register(Box::new(unobserved_connections.clone()))?;
        registry.register(Box::new(relists.clone()))?;
        registry.register(Box::new(decoder_queue_bytes.clone()))?;
        Ok(Self {
            requests,
            request_errors,
            request_duration,
            index_sandboxes,
            index_containers,
            subscribers,
            resyncs,
            upstream_connected,
            undelivered,
            observations_dropped,
            observe_errors,
            compressed_skipped,
            answers_unchanged,
            answers_deferred,
            answers_unread,
            relayed_bytes,
            connections,
            handshake_timeouts,
            watch_rejected,
            connections_refused,
            cri_repairs,
            unobserved_connections,
            relists,
            decoder_queue_bytes,
            index_truncated,
        })
    }

    /// Counts the entries of a rebuild or relist that are marked truncated.
    pub fn count_truncated(
        &self,
        sandboxes: &[podward_api::shim::v1::Sandbox],
        containers: &[podward_api::shim::v1::Container],
    ) {
        let s = sandboxes.iter().filter(|s| s.truncated).count();
        let c = containers.iter().filter(|c| c.truncated).count();
        self.index_truncated
            .with_label_values(&["sandbox"])
            .inc_by(s as u64);
        self.index_truncated
            .with_label_values(&["container"])
            .inc_by(c as u64);
    }

    /// Counts one repair of a CRI message.
    pub fn count_repair(&self, r: &podward_api::tolerant::Repair) {
        self.cri_repairs
            .with_label_values(&[r.action.label()])
            .inc();
    }

    /// Metrics on a private registry, for tests and tools that do not export them.
    pub fn unregistered() -> Self {
        // A fresh registry cannot hold duplicates, so this cannot fail; fall back defensively.
        match Self::new(&Registry::new()) {
            Ok(m) => m,
            Err(e) => unreachable_metrics(e),
        }
    }
}

/// Method labels kept before further paths are folded into `other`: paths come from callers,
/// and a hostile one must not grow the metrics without bound.
const MAX_METHOD_LABELS: usize = 256;

/// Per-method metric handles, resolved once per method rather than per call.
#[derive(Debug)]
pub struct MethodMetrics {
    /// The method label (the path, or `other`).
    pub label: Arc<str>,
    /// `podward_shim_requests_total{method}`.
    pub requests: IntCounter,
    /// `podward_shim_request_duration_seconds{method}`.
    pub duration: Histogram,
}

/// Method label table with bounded cardinality.
#[derive(Debug)]
pub struct MethodTable {
    metrics: Metrics,
    table: Mutex<HashMap<String, Arc<MethodMetrics>>>,
}

impl MethodTable {
    /// An empty table.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            table: Mutex::new(HashMap::default()),
        }
    }

    /// The handles for `path`.
    pub fn get(&self, path: &str) -> Arc<MethodMetrics> {
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

#[cold]
fn unreachable_metrics(e: MetricsError) -> ! {
    // Only reachable if two metrics above share a name: a bug caught by the unit test below.
    panic!("metric definitions are inconsistent: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_metrics_register_and_are_exported() {
        let r = Registry::new();
        let m = Metrics::new(&r).expect("register");
        m.requests.with_label_values(&["/x"]).inc();
        m.request_errors.with_label_values(&["/x", "14"]).inc();
        m.request_duration.with_label_values(&["/x"]).observe(0.001);
        let names: Vec<String> = r.gather().iter().map(|f| f.name().to_owned()).collect();
        for want in [
            "podward_shim_requests_total",
            "podward_shim_request_errors_total",
            "podward_shim_request_duration_seconds",
            "podward_shim_index_sandboxes",
            "podward_shim_index_containers",
            "podward_shim_subscribers",
            "podward_shim_resyncs_total",
            "podward_shim_upstream_connected",
            "podward_shim_undelivered_total",
            "podward_shim_observe_errors_total",
            "podward_shim_connections",
            "podward_shim_answers_unchanged_total",
            "podward_shim_answers_deferred_total",
            "podward_shim_answers_unread_total",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
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
