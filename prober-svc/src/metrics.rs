//! Prometheus metrics, with kubelet's names and labels for the probe series so existing
//! dashboards keep working, plus podward's own (`podward_prober_*`).
//!
//! The per-worker probe series live in [`series`] (compact, streamed as text); the node-wide
//! ones are ordinary `prometheus` metrics. The probe series are also served on
//! [`PROBES_PATH`], as kubelet serves its own ([`Metrics::probes_page`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use podward_api::daemon::admin::MetricsPage;
use prometheus::{
    CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::spec::ProbeType;

pub mod series;

pub use podward_api::daemon::metrics::MetricsError;
pub use series::{SeriesHandle as WorkerMetrics, SeriesSet};

/// Where kubelet serves its probe families (`proberMetricsPath` in kubelet's
/// `pkg/kubelet/server/server.go`), apart from its `/metrics`.
pub const PROBES_PATH: &str = "/metrics/probes";

/// The registry family kubelet puts on [`PROBES_PATH`] beside the probe families
/// (`RegisterProcessStartTime` in `InstallDefaultHandlers`); the process collector exports it.
const PROCESS_START_TIME: &str = "process_start_time_seconds";

/// Every metric of the prober.
#[derive(Clone)]
pub struct Metrics {
    series: Arc<SeriesSet>,
    lateness: Histogram,
    fine_lateness: Arc<FineHistogram>,
    /// Workers running, by probe type.
    pub workers: IntGaugeVec,
    /// Kills performed.
    pub kills: CounterVec,
    /// Spec errors per pod.
    pub spec_errors: GaugeVec,
    /// Whether a source is connected (`source` = shim | containerd).
    pub source_connected: GaugeVec,
    /// Probes that errored on every attempt (discarded, as kubelet discards them before its
    /// `prober_probe_total`), by probe type.
    pub probe_errors: IntCounterVec,
    /// Sockets held by network probes in flight, all pods (a closed probe socket is never held:
    /// closes do not wait).
    pub sockets_held: IntGauge,
    /// Bytes of what probe targets sent that probes in flight hold, all pods (the node-wide
    /// budget's use).
    pub target_memory_bytes: IntGauge,
    /// Probes that timed out while the prober itself was starved (recorded Unknown, retried at
    /// once, not counted as failures), by probe type.
    pub probes_starved: IntCounterVec,
    /// HTTPS handshakes redone with OpenSSL as Go's client because the server sent a handshake
    /// message over rustls' 64 KiB cap (a certificate chain of 64–256 KiB).
    pub tls_fallbacks: IntCounter,
    /// HTTPS preStop hooks delivered over HTTP because their server answered in plain HTTP
    /// (kubelet's `kubelet_lifecycle_handler_http_fallbacks_total`).
    pub lifecycle_http_fallbacks: IntCounter,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let m = Self::unregistered()?;
        registry.register(Box::new(m.lateness.clone()))?;
        registry.register(Box::new(m.workers.clone()))?;
        registry.register(Box::new(m.kills.clone()))?;
        registry.register(Box::new(m.spec_errors.clone()))?;
        registry.register(Box::new(m.source_connected.clone()))?;
        registry.register(Box::new(m.probe_errors.clone()))?;
        registry.register(Box::new(m.sockets_held.clone()))?;
        registry.register(Box::new(m.target_memory_bytes.clone()))?;
        registry.register(Box::new(m.probes_starved.clone()))?;
        registry.register(Box::new(m.tls_fallbacks.clone()))?;
        registry.register(Box::new(m.lifecycle_http_fallbacks.clone()))?;
        Ok(m)
    }

    /// Metrics that no registry exports (unit tests).
    pub fn unregistered() -> Result<Self, MetricsError> {
        Ok(Self {
            series: Arc::default(),
            lateness: Histogram::with_opts(
                HistogramOpts::new(
                    "podward_prober_schedule_lateness_seconds",
                    "How late a periodic probe started after its due time.",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
                ]),
            )?,
            fine_lateness: Arc::new(FineHistogram::default()),
            workers: IntGaugeVec::new(
                Opts::new(
                    "podward_prober_workers",
                    "Probe workers running, by probe type.",
                ),
                &["probe_type"],
            )?,
            kills: CounterVec::new(
                Opts::new(
                    "podward_prober_kills_total",
                    "Containers stopped after a liveness or startup failure.",
                ),
                &["probe_type", "container", "pod", "namespace"],
            )?,
            spec_errors: GaugeVec::new(
                Opts::new(
                    "podward_prober_spec_errors",
                    "Errors in a pod's podward.io/probes annotation.",
                ),
                &["pod", "namespace", "pod_uid"],
            )?,
            source_connected: GaugeVec::new(
                Opts::new(
                    "podward_prober_source_connected",
                    "1 while the prober follows this source of pods (shim or containerd).",
                ),
                &["source"],
            )?,
            probe_errors: IntCounterVec::new(
                Opts::new(
                    "podward_prober_probe_errors_total",
                    "Probes that errored on all three attempts (no answer: unresolvable port, exec runtime error, URL that cannot be built), by probe type. Discarded like kubelet discards them, so prober_probe_total does not count them.",
                ),
                &["probe_type"],
            )?,
            sockets_held: IntGauge::new(
                "podward_prober_sockets_held",
                "Sockets held by HTTP, TCP and gRPC probes in flight (at most one each; each pod has at most its per-pod limit in flight).",
            )?,
            target_memory_bytes: IntGauge::new(
                "podward_prober_target_memory_bytes",
                "Bytes of what probe targets sent (heads, bodies, TLS and HTTP/2 frames) held by network probes in flight, all pods: the use of the node-wide budget (--target-memory-budget-bytes).",
            )?,
            probes_starved: IntCounterVec::new(
                Opts::new(
                    "podward_prober_probes_starved_total",
                    "Probes that reached their timeout while the prober itself was starved of CPU for more than half of it: recorded Unknown and probed again at once (a few times at most), never counted as failures, by probe type.",
                ),
                &["probe_type"],
            )?,
            tls_fallbacks: IntCounter::new(
                "podward_prober_tls_fallback_total",
                "HTTPS probe handshakes redone with OpenSSL configured as Go's client, because the server sent a handshake message (a certificate chain) over rustls' 64 KiB cap; Go's client takes up to 256 KiB.",
            )?,
            lifecycle_http_fallbacks: IntCounter::new(
                "podward_prober_lifecycle_handler_http_fallbacks_total",
                "HTTPS preStop hooks delivered over HTTP because their server answered the TLS handshake in plain HTTP (kubelet's kubelet_lifecycle_handler_http_fallbacks_total; each also a LifecycleHTTPFallback event).",
            )?,
        })
    }

    /// A worker's `prober_probe_total` and `prober_probe_duration_seconds` series (each appears
    /// in `/metrics` with its first sample).
    pub fn worker(
        &self,
        ty: ProbeType,
        container: &str,
        pod: &str,
        ns: &str,
        uid: &str,
    ) -> WorkerMetrics {
        self.series.add(series::SeriesLabels {
            probe_type: ty.name(),
            container: container.into(),
            pod: pod.into(),
            namespace: ns.into(),
            pod_uid: uid.into(),
        })
    }

    /// The per-worker series, for the admin endpoint to stream and the benchmark to sum.
    pub fn series(&self) -> &Arc<SeriesSet> {
        &self.series
    }

    /// The page on [`PROBES_PATH`], what kubelet serves there: the process start time, then
    /// `prober_probe_total` and `prober_probe_duration_seconds`.
    pub fn probes_page(&self) -> MetricsPage {
        MetricsPage {
            families: vec![PROCESS_START_TIME.to_owned()],
            text: vec![self.series.clone()],
        }
    }

    /// Records how late a periodic probe started.
    pub fn observe_lateness(&self, late: Duration) {
        self.lateness.observe(late.as_secs_f64());
        self.fine_lateness.observe(late);
    }

    /// Exact-to-100-µs lateness histogram (the benchmark's percentiles).
    pub fn fine_lateness(&self) -> &FineHistogram {
        &self.fine_lateness
    }

    /// A gauge for one source.
    pub fn source(&self, name: &str) -> Gauge {
        self.source_connected.with_label_values(&[name])
    }
}

/// A fixed histogram with 100 µs buckets up to 2 s (and one overflow bucket): one atomic add per
/// sample, percentiles exact to the bucket width. Prometheus buckets are too coarse to tell a
/// 20 ms p99 goal.
pub struct FineHistogram {
    buckets: Box<[AtomicU64]>,
}

const FINE_WIDTH_US: u64 = 100;
const FINE_BUCKETS: usize = 20_001;

impl Default for FineHistogram {
    fn default() -> Self {
        Self {
            buckets: (0..FINE_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl FineHistogram {
    /// Adds one sample.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = usize::try_from(us / FINE_WIDTH_US)
            .unwrap_or(usize::MAX)
            .min(FINE_BUCKETS - 1);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sample count per bucket (a copy, to diff two moments).
    pub fn counts(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1) of `counts`.
    pub fn quantile(counts: &[u64], q: f64) -> Option<Duration> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(Duration::from_micros((i as u64 + 1) * FINE_WIDTH_US));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    #[ignore = "measurement: memory of 20,000 workers' series"]
    fn memory_per_worker_series() {
        let m = Metrics::unregistered().expect("metrics");
        let before = rss_kib();
        let ws: Vec<WorkerMetrics> = (0..20_000)
            .map(|i| {
                m.worker(
                    ProbeType::Liveness,
                    "app",
                    &format!("pod-{i}"),
                    "bench",
                    &format!("uid-{i}"),
                )
            })
            .collect();
        for w in &ws {
            w.success(Duration::from_millis(1));
        }
        let after = rss_kib();
        println!("{} bytes per worker", (after - before) * 1024 / 20_000);
        assert_eq!(ws.len(), 20_000);
    }
}
