//! kubelet's rule has one exception here: a probe that timed out while the prober itself was
//! starved of CPU says nothing of its target, so it is run again at once, and discarded (neither
//! success nor failure) when every run was starved (`docs/prober.md`, "Starvation").

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::state::Worker;
use crate::model::outcome::Outcome;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo};

/// How often a starved probe is logged at WARN (the others at DEBUG; all are counted).
pub const STARVED_LOG_EVERY: Duration = Duration::from_secs(10);

/// How many times one probe is run again at once after timing out while the prober was starved;
/// bounded so a prober starved for good still moves on to its next period (the probe is then
/// discarded, neither success nor failure).
pub const MAX_STARVED_RETRIES: u32 = 2;

/// Output recorded for a probe discarded because the prober was starved.
const STARVED_OUTPUT: &str =
    "probe timed out while the prober itself was starved of CPU; result unknown, not counted";

impl Worker {
    /// Runs the probe; runs it again at once (at most [`MAX_STARVED_RETRIES`] times) when it
    /// failed by reaching its timeout while the prober itself was starved for more than half the
    /// timeout: such a failure says nothing of the target. `None` when every run was starved: the
    /// probe is discarded (recorded Unknown). Returns the outcome (capped: the one place probe output
    /// is) and how long its run took.
    pub(super) async fn run_unstarved(
        &self,
        pod: &PodInfo,
        c: &ContainerInfo,
        ip: std::net::IpAddr,
    ) -> Option<(Outcome, Duration)> {
        let meter = self.ctx.starvation.as_ref();
        for retry in 0..=MAX_STARVED_RETRIES {
            let began = Instant::now();
            let starved_before = meter.map(|m| m.starved());
            let run = match &self.pod_share {
                Some(share) => self
                    .ctx
                    .runner
                    .run_for_pod(share, self.key.ty, &self.spec, ip, c),
                None => self.ctx.runner.run(self.key.ty, &self.spec, ip, c),
            };
            let outcome = run.await.capped();
            let took = began.elapsed();
            let failed = matches!(outcome, Outcome::Failure(_));
            let (Some(m), Some(before)) = (meter, starved_before) else {
                return Some((outcome, took));
            };
            // Only a failure that lasted the whole timeout can be the prober's own lateness; a
            // quick failure (refused, a bad status) is the target's whatever the load.
            if !failed || took < self.spec.timeout {
                return Some((outcome, took));
            }
            let starved = m.starved().saturating_sub(before);
            if starved.saturating_mul(2) <= self.spec.timeout {
                return Some((outcome, took));
            }
            self.starved(pod, c, took, starved, retry);
        }
        None
    }

    /// A probe that timed out while the prober was starved: counted, logged (WARN at most once
    /// per [`STARVED_LOG_EVERY`] on the node), recorded Unknown.
    fn starved(
        &self,
        pod: &PodInfo,
        c: &ContainerInfo,
        took: Duration,
        starved: Duration,
        retry: u32,
    ) {
        self.ctx
            .metrics
            .probes_starved
            .with_label_values(&[self.key.ty.name()])
            .inc();
        let now = self.ctx.clock.now_ns();
        let every = i64::try_from(STARVED_LOG_EVERY.as_nanos()).unwrap_or(i64::MAX);
        let last = self.ctx.starved_logged_at_ns.load(Ordering::Relaxed);
        let warn = now.saturating_sub(last) >= every
            && self
                .ctx
                .starved_logged_at_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if warn {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
                container_id = %c.id, probe = self.key.ty.name(),
                took_ms = took.as_millis(), starved_ms = starved.as_millis(),
                timeout_ms = self.spec.timeout.as_millis(), retry,
                "probe timed out while the prober itself was starved of CPU: result unknown, \
                 not counted, probing again at once (logged once per 10 s for the node; all \
                 are counted in podward_prober_probes_starved_total)");
        } else {
            tracing::debug!(pod = %pod.name, container = %c.name, probe = self.key.ty.name(),
                took_ms = took.as_millis(), starved_ms = starved.as_millis(), retry,
                "probe timed out while the prober itself was starved");
        }
        self.status.update(|st| {
            st.last_probe_result = Some(ProbeResult::Unknown);
            if st.last_output != STARVED_OUTPUT {
                st.last_output = STARVED_OUTPUT.to_owned();
            }
            st.last_probe_at_ns = now;
        });
    }
}
