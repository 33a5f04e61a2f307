//! Prometheus metrics, registered on the registry the caller passes (no global registry).

use std::time::Duration;

use podward_api::daemon::metrics::MetricsError;
use podward_api::housekeeper::v1::{Outcome, Plan};
use prometheus::{Gauge, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::decision::plan::{Category, Counts};

/// The housekeeper's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    found: IntGaugeVec,
    acted: IntCounterVec,
    blocked: IntGaugeVec,
    foreign: IntGaugeVec,
    failed: IntCounterVec,
    pass_duration: Histogram,
    last_success: Gauge,
    source_errors: IntCounterVec,
}

impl Metrics {
    /// Creates and registers the metrics on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let ns = "podward_housekeeper";
        let m = Self {
            found: IntGaugeVec::new(
                Opts::new("found", "Orphans and leaks found by the last pass (planned, waiting, blocked or reported)")
                    .namespace(ns),
                &["category"],
            )?,
            acted: IntCounterVec::new(
                Opts::new("acted_total", "Actions completed").namespace(ns),
                &["category"],
            )?,
            blocked: IntGaugeVec::new(
                Opts::new("blocked", "Orphans a safety rule kept in the last pass").namespace(ns),
                &["category"],
            )?,
            foreign: IntGaugeVec::new(
                Opts::new(
                    "foreign",
                    "Entries under a root that are not in kubelet's name shapes (never acted on; many \
                     usually mean a root flag points at the wrong directory)",
                )
                .namespace(ns),
                &["category"],
            )?,
            failed: IntCounterVec::new(
                Opts::new("failed_total", "Actions that failed").namespace(ns),
                &["category"],
            )?,
            pass_duration: Histogram::with_opts(
                HistogramOpts::new("pass_duration_seconds", "Duration of a pass (read, plan, act)")
                    .namespace(ns)
                    .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            )?,
            last_success: Gauge::with_opts(
                Opts::new(
                    "last_success_timestamp_seconds",
                    "Unix time of the last pass whose sources were all read",
                )
                .namespace(ns),
            )?,
            source_errors: IntCounterVec::new(
                Opts::new("source_errors_total", "Failed reads, by source").namespace(ns),
                &["source"],
            )?,
        };
        registry.register(Box::new(m.found.clone()))?;
        registry.register(Box::new(m.acted.clone()))?;
        registry.register(Box::new(m.blocked.clone()))?;
        registry.register(Box::new(m.foreign.clone()))?;
        registry.register(Box::new(m.failed.clone()))?;
        registry.register(Box::new(m.pass_duration.clone()))?;
        registry.register(Box::new(m.last_success.clone()))?;
        registry.register(Box::new(m.source_errors.clone()))?;
        for c in Category::ALL {
            m.acted.with_label_values(&[c.as_str()]);
            m.failed.with_label_values(&[c.as_str()]);
        }
        Ok(m)
    }

    /// Records one completed pass; `counts` are the plan's per-category totals before the
    /// listing caps.
    pub fn record(&self, plan: &Plan, counts: &Counts, took: Duration) {
        self.pass_duration.observe(took.as_secs_f64());
        for r in plan.sources.iter().filter(|r| !r.ok) {
            self.source_errors
                .with_label_values(&[r.name.as_str()])
                .inc();
        }
        if !plan.sources_ok {
            // Nothing was looked at: keep the last pass's gauges rather than report zeros.
            return;
        }
        self.last_success
            .set(podward_api::time::now_ns() as f64 / 1e9);
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for c in &counts.by_category {
            let labels = [c.category.as_str()];
            self.found.with_label_values(&labels).set(gauge(c.found));
            self.blocked
                .with_label_values(&labels)
                .set(gauge(c.blocked));
            self.foreign
                .with_label_values(&labels)
                .set(gauge(c.foreign));
        }
        for c in Category::ALL {
            let actions = plan.actions.iter().filter(|a| Category::of(a.kind()) == c);
            for a in actions {
                match a.outcome() {
                    Outcome::Done => self.acted.with_label_values(&[c.as_str()]).inc(),
                    Outcome::Failed => self.failed.with_label_values(&[c.as_str()]).inc(),
                    _ => {}
                }
            }
        }
    }
}
