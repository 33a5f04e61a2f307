//! The webhook's metrics (`podward_admission_*`).

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use super::takeover::SkipReason;
use crate::metrics::MetricsError;

/// What the webhook counts.
#[derive(Clone)]
pub struct AdmissionMetrics {
    /// AdmissionReviews answered (every answer allows the pod).
    pub reviews: IntCounter,
    /// Pods whose probes were moved.
    pub takeovers: IntCounter,
    /// Pods admitted unchanged, by reason.
    pub skipped: IntCounterVec,
    /// Requests refused as not an AdmissionReview (the API server then applies the
    /// failurePolicy: the pod is admitted unchanged).
    pub bad_requests: IntCounter,
    /// Serving-certificate loads after the first, by result (`ok`, `error`).
    pub cert_reloads: IntCounterVec,
}

impl AdmissionMetrics {
    /// Creates the metrics, registered in `registry` when given; every skip reason and reload
    /// result starts at 0, so that `increase()` sees the first one.
    pub fn new(registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let m = Self {
            reviews: IntCounter::new(
                "podward_admission_reviews_total",
                "Pod AdmissionReviews answered by the takeover webhook.",
            )?,
            takeovers: IntCounter::new(
                "podward_admission_takeovers_total",
                "Pods whose spec probes the webhook moved into the podward.io/probes annotation.",
            )?,
            skipped: IntCounterVec::new(
                Opts::new(
                    "podward_admission_skipped_total",
                    "Pods the webhook admitted unchanged (kubelet keeps probing them), by reason.",
                ),
                &["reason"],
            )?,
            bad_requests: IntCounter::new(
                "podward_admission_bad_requests_total",
                "Requests to the webhook that were not a readable AdmissionReview v1 (answered 400).",
            )?,
            cert_reloads: IntCounterVec::new(
                Opts::new(
                    "podward_admission_certificate_reloads_total",
                    "Serving certificate changes picked up from the files (ok), or refused as unreadable (error: the previous one is kept).",
                ),
                &["result"],
            )?,
        };
        for r in SkipReason::ALL {
            m.skipped.with_label_values(&[r.label()]);
        }
        for r in ["ok", "error"] {
            m.cert_reloads.with_label_values(&[r]);
        }
        if let Some(reg) = registry {
            reg.register(Box::new(m.reviews.clone()))?;
            reg.register(Box::new(m.takeovers.clone()))?;
            reg.register(Box::new(m.skipped.clone()))?;
            reg.register(Box::new(m.bad_requests.clone()))?;
            reg.register(Box::new(m.cert_reloads.clone()))?;
        }
        Ok(m)
    }
}
