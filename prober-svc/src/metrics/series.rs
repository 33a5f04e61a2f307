//! kubelet's per-container probe series (`prober_probe_total`, `prober_probe_duration_seconds`),
//! kept compact and written as Prometheus text by the admin endpoint.
//!
//! With the `prometheus` crate each labelled child owns its label pairs as strings and its
//! histogram shards, many times what the counts themselves take, and at the design point's worker
//! count a large share of the prober's memory (docs/benchmarks.md, Prober); here a worker's
//! series are one compact record, and a scrape streams them in chunks instead of gathering copies
//! of all of them first.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::daemon::admin::{CHUNK_BYTES, TextMetrics, write_header, write_labels};

/// kubelet's buckets for `prober_probe_duration_seconds` (Prometheus' `DefBuckets`).
pub const DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The `le` label of each bucket of [`DURATION_BUCKETS`] and of `+Inf`, written once here rather
/// than formatted for every series of every scrape (a test checks they match the bounds).
const DURATION_LE: [&str; DURATION_BUCKETS.len() + 1] = [
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
];

const TOTAL: &str = "prober_probe_total";
const TOTAL_HELP: &str =
    "Cumulative number of a liveness, readiness or startup probe for a container by result.";
const DURATION: &str = "prober_probe_duration_seconds";
const DURATION_HELP: &str = "Duration in seconds for a probe response.";

/// The labels of one worker's series.
#[derive(Debug)]
pub struct SeriesLabels {
    /// kubelet's probe type name (`Liveness`, `Readiness`, `Startup`).
    pub probe_type: &'static str,
    /// Container name.
    pub container: Box<str>,
    /// Pod name.
    pub pod: Box<str>,
    /// Pod namespace.
    pub namespace: Box<str>,
    /// Pod UID.
    pub pod_uid: Box<str>,
}

/// One worker's counters and duration histogram.
#[derive(Debug)]
pub struct Series {
    labels: SeriesLabels,
    successful: AtomicU64,
    failed: AtomicU64,
    /// Per-bucket (not cumulative) counts; the last slot is above the largest bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Series {
    /// Counts a successful probe that took `took` (duration observed for successes, as kubelet).
    pub fn success(&self, took: Duration) {
        self.successful.fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let i = DURATION_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(DURATION_BUCKETS.len());
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Counts a failed probe.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Successful and failed probes counted so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.successful.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    fn write_total(&self, out: &mut String) {
        let l = &self.labels;
        for (result, n) in [("successful", &self.successful), ("failed", &self.failed)] {
            let n = n.load(Ordering::Relaxed);
            // Like kubelet's, a series appears with its first sample.
            if n == 0 {
                continue;
            }
            out.push_str(TOTAL);
            write_labels(
                out,
                &[
                    ("container", &l.container),
                    ("namespace", &l.namespace),
                    ("pod", &l.pod),
                    ("pod_uid", &l.pod_uid),
                    ("probe_type", l.probe_type),
                    ("result", result),
                ],
            );
            let _ = writeln!(out, " {n}");
        }
    }

    fn write_duration(&self, out: &mut String) {
        let l = &self.labels;
        let mut cumulative = 0;
        for (le, count) in DURATION_LE.iter().zip(&self.buckets) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = write!(out, "{DURATION}_bucket");
            write_labels(
                out,
                &[
                    ("container", &l.container),
                    ("namespace", &l.namespace),
                    ("pod", &l.pod),
                    ("probe_type", l.probe_type),
                    ("le", le),
                ],
            );
            let _ = writeln!(out, " {cumulative}");
        }
        let pairs = [
            ("container", &*l.container),
            ("namespace", &*l.namespace),
            ("pod", &*l.pod),
            ("probe_type", l.probe_type),
        ];
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = write!(out, "{DURATION}_sum");
        write_labels(out, &pairs);
        let _ = writeln!(out, " {sum}");
        let _ = write!(out, "{DURATION}_count");
        write_labels(out, &pairs);
        let _ = writeln!(out, " {cumulative}");
    }

    fn observed(&self) -> bool {
        self.successful.load(Ordering::Relaxed) > 0
    }

    fn counted(&self) -> bool {
        let (s, f) = self.totals();
        s > 0 || f > 0
    }
}

/// Every worker's series, in creation order.
#[derive(Debug, Default)]
pub struct SeriesSet {
    series: Mutex<BTreeMap<u64, Arc<Series>>>,
    next_id: AtomicU64,
}

/// A worker's handle on its series; [`SeriesHandle::remove`] takes them out of `/metrics`.
#[derive(Debug)]
pub struct SeriesHandle {
    id: u64,
    set: Arc<SeriesSet>,
    series: Arc<Series>,
}

impl std::ops::Deref for SeriesHandle {
    type Target = Series;
    fn deref(&self) -> &Series {
        &self.series
    }
}

impl SeriesHandle {
    /// Deletes this worker's series (called when it exits).
    pub fn remove(&self) {
        self.set.series.lock().remove(&self.id);
    }
}

// Position layout for `render`: family in bit 63 (0 = totals, 1 = durations), bit 62 set once
// the family's header is written, the next series ID in the low bits.
const FAMILY_BIT: u64 = 1 << 63;
const HEADER_BIT: u64 = 1 << 62;
const ID_MASK: u64 = HEADER_BIT - 1;

impl SeriesSet {
    /// Registers a worker's series.
    pub fn add(self: &Arc<Self>, labels: SeriesLabels) -> SeriesHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & ID_MASK;
        let series = Arc::new(Series {
            labels,
            successful: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            buckets: Default::default(),
            sum_ns: AtomicU64::new(0),
        });
        self.series.lock().insert(id, series.clone());
        SeriesHandle {
            id,
            set: self.clone(),
            series,
        }
    }

    /// Sum of successful and failed probes over the live series.
    pub fn totals(&self) -> (u64, u64) {
        self.series
            .lock()
            .values()
            .map(|s| s.totals())
            .fold((0, 0), |(a, b), (s, f)| (a + s, b + f))
    }
}

impl TextMetrics for SeriesSet {
    fn render(&self, from: u64, out: &mut String) -> Option<u64> {
        let mut durations = from & FAMILY_BIT != 0;
        let mut header = from & HEADER_BIT != 0;
        let mut next = from & ID_MASK;
        let series = self.series.lock();
        loop {
            for (id, s) in series.range(next..) {
                if out.len() >= CHUNK_BYTES {
                    let fam = if durations { FAMILY_BIT } else { 0 };
                    let hdr = if header { HEADER_BIT } else { 0 };
                    return Some(fam | hdr | id);
                }
                let present = if durations { s.observed() } else { s.counted() };
                if !present {
                    continue;
                }
                if !header {
                    if durations {
                        write_header(out, DURATION, DURATION_HELP, "histogram");
                    } else {
                        write_header(out, TOTAL, TOTAL_HELP, "counter");
                    }
                    header = true;
                }
                if durations {
                    s.write_duration(out);
                } else {
                    s.write_total(out);
                }
            }
            if durations {
                return None;
            }
            durations = true;
            header = false;
            next = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pod: &str) -> SeriesLabels {
        SeriesLabels {
            probe_type: "Readiness",
            container: "app".into(),
            pod: pod.into(),
            namespace: "ns".into(),
            pod_uid: format!("uid-{pod}").into(),
        }
    }

    fn render_all(set: &SeriesSet) -> (String, usize) {
        let mut text = String::new();
        let mut chunks = 0;
        let mut pos = Some(0);
        while let Some(p) = pos {
            let mut out = String::new();
            pos = set.render(p, &mut out);
            text.push_str(&out);
            chunks += 1;
        }
        (text, chunks)
    }

    #[test]
    fn le_labels_are_the_bucket_bounds_as_prometheus_prints_them() {
        let printed: Vec<String> = DURATION_BUCKETS.iter().map(|b| b.to_string()).collect();
        assert_eq!(&DURATION_LE[..DURATION_BUCKETS.len()], printed.as_slice());
        assert_eq!(DURATION_LE[DURATION_BUCKETS.len()], "+Inf");
    }

    #[test]
    fn series_appear_with_their_first_sample_and_go_with_the_worker() {
        let set = Arc::new(SeriesSet::default());
        let h = set.add(labels("web"));
        assert_eq!(render_all(&set).0, "");
        h.failed();
        let (text, _) = render_all(&set);
        assert_eq!(
            text,
            "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.\n\
             # TYPE prober_probe_total counter\n\
             prober_probe_total{container=\"app\",namespace=\"ns\",pod=\"web\",pod_uid=\"uid-web\",probe_type=\"Readiness\",result=\"failed\"} 1\n"
        );
        h.success(Duration::from_millis(30));
        h.success(Duration::from_secs(11));
        let (text, _) = render_all(&set);
        assert!(text.contains("result=\"successful\"} 2\n"), "{text}");
        let pre = "prober_probe_duration_seconds_bucket{container=\"app\",namespace=\"ns\",pod=\"web\",probe_type=\"Readiness\",";
        assert!(text.contains(&format!("{pre}le=\"0.025\"}} 0\n")), "{text}");
        assert!(text.contains(&format!("{pre}le=\"0.05\"}} 1\n")), "{text}");
        assert!(text.contains(&format!("{pre}le=\"10\"}} 1\n")), "{text}");
        assert!(text.contains(&format!("{pre}le=\"+Inf\"}} 2\n")), "{text}");
        assert!(text.contains("_sum{container=\"app\",namespace=\"ns\",pod=\"web\",probe_type=\"Readiness\"} 11.03\n"), "{text}");
        assert!(text.contains("_count{container=\"app\",namespace=\"ns\",pod=\"web\",probe_type=\"Readiness\"} 2\n"), "{text}");
        assert_eq!(text.matches("# TYPE").count(), 2, "{text}");
        h.remove();
        assert_eq!(render_all(&set).0, "");
    }

    #[test]
    fn a_large_set_renders_in_bounded_chunks_with_each_family_together() {
        let set = Arc::new(SeriesSet::default());
        let hs: Vec<SeriesHandle> = (0..5_000)
            .map(|i| set.add(labels(&format!("p{i}"))))
            .collect();
        for h in &hs {
            h.success(Duration::from_millis(1));
            h.failed();
        }
        let (text, chunks) = render_all(&set);
        assert!(chunks > 10, "{chunks} chunks");
        let totals = text.matches("prober_probe_total{").count();
        let counts = text.matches("prober_probe_duration_seconds_count{").count();
        assert_eq!((totals, counts), (10_000, 5_000));
        // Each family's lines are contiguous: its header once, and no total after a duration.
        assert_eq!(text.matches("# TYPE prober_probe_total").count(), 1);
        assert_eq!(
            text.matches("# TYPE prober_probe_duration_seconds").count(),
            1
        );
        let first_duration = text
            .find("prober_probe_duration_seconds_bucket")
            .unwrap_or(0);
        let last_total = text.rfind("prober_probe_total{").unwrap_or(usize::MAX);
        assert!(last_total < first_duration);
        assert_eq!(set.totals(), (5_000, 5_000));
    }

    #[test]
    fn hostile_label_values_cannot_break_the_exposition() {
        let set = Arc::new(SeriesSet::default());
        let h = set.add(labels("evil\"} 9\nfake_metric 1"));
        h.failed();
        let (text, _) = render_all(&set);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("fake_metric")),
            "{text}"
        );
    }
}
