//! One pass: read the sources, fold the runtime's answer into the orphan history, plan, and act
//! unless dry-run. Passes are serialised (the timer loop and the API share one lock), and the
//! last one is kept for `Status`.

use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::{Plan, StatusResponse};

use crate::act::{self, Actuator};
use crate::clock::Clock;
use crate::gate::UidGate;
use crate::metrics::Metrics;
use crate::orphan::OrphanTracker;
use crate::plan::{self, PlanSettings};
use crate::prober_link::ProberLink;
use crate::sources::{self, Sources};

/// Passes slower than this log a warning with the per-source breakdown (kubelet's
/// `housekeepingWarningDuration`).
pub const SLOW_PASS: Duration = Duration::from_secs(1);

/// What a pass may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Compute what the next pass would do; change nothing, not even the history (`Plan`).
    Preview,
    /// A real pass that records its observations but acts on nothing.
    DryRun,
    /// A real pass that acts.
    Act,
}

#[derive(Debug)]
struct State {
    tracker: OrphanTracker,
    passes: u64,
    last: Option<Plan>,
    last_duration: Duration,
    last_success_at_ns: i64,
    actions_done: u64,
    actions_failed: u64,
}

/// The housekeeper's core: sources, actuator, history.
pub struct Reconciler<S, A> {
    sources: Arc<S>,
    actuator: Arc<A>,
    clock: Arc<dyn Clock>,
    settings: PlanSettings,
    gate: UidGate,
    metrics: Option<Metrics>,
    prober: Option<ProberLink>,
    state: tokio::sync::Mutex<State>,
}

impl<S: Sources, A: Actuator> Reconciler<S, A> {
    /// A reconciler with an empty history.
    pub fn new(
        sources: Arc<S>,
        actuator: Arc<A>,
        clock: Arc<dyn Clock>,
        settings: PlanSettings,
    ) -> Self {
        Self {
            sources,
            actuator,
            clock,
            state: tokio::sync::Mutex::new(State {
                tracker: OrphanTracker::new(settings.orphan_grace),
                passes: 0,
                last: None,
                last_duration: Duration::ZERO,
                last_success_at_ns: 0,
                actions_done: 0,
                actions_failed: 0,
            }),
            settings,
            gate: UidGate::new(),
            metrics: None,
            prober: None,
        }
    }

    /// Records passes in `metrics`.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Tells `prober` about pods that are gone after each acting pass.
    pub fn with_prober(mut self, prober: ProberLink) -> Self {
        self.prober = Some(prober);
        self
    }

    /// The per-UID gate (single-flight and backoff), shared by every pass.
    pub fn gate(&self) -> &UidGate {
        &self.gate
    }

    /// Runs one pass and returns its plan (with outcomes when it acted) and its duration.
    pub async fn pass(&self, mode: Mode) -> (Plan, Duration) {
        let mut st = self.state.lock().await;
        let start = tokio::time::Instant::now();
        let snapshot = sources::read_all(self.sources.as_ref()).await;
        let now = self.clock.now();
        let ok = snapshot.required_ok();
        let mut preview_tracker;
        let tracker = if mode == Mode::Preview {
            preview_tracker = st.tracker.clone();
            &mut preview_tracker
        } else {
            &mut st.tracker
        };
        if ok {
            tracker.observe(now, &plan::present(&snapshot), plan::candidates(&snapshot));
        } else {
            // No evidence of absence from a pass that could not read: start counting again.
            tracker.reset();
            let failed: Vec<String> = snapshot
                .reports
                .iter()
                .filter(|r| !r.ok && !r.optional)
                .map(|r| format!("{}: {}", r.name, r.error))
                .collect();
            tracing::warn!(failed = ?failed, "a required source failed: this pass plans and acts on nothing");
        }
        let tracker: &OrphanTracker = tracker;
        let mut pass = plan::build(snapshot, tracker, &self.gate, now, &self.settings);
        pass.plan.dry_run = mode != Mode::Act;
        if mode == Mode::Preview {
            pass.plan.pass = st.passes + 1;
            return (pass.plan, start.elapsed());
        }
        st.passes += 1;
        pass.plan.pass = st.passes;
        if mode == Mode::Act && !pass.ops.is_empty() {
            let extra = act::execute(
                &mut pass,
                self.sources.clone(),
                self.actuator.clone(),
                &self.gate,
                self.clock.as_ref(),
                self.settings.kubelet_root.clone(),
            )
            .await;
            pass.plan.findings.extend(extra);
        }
        if mode == Mode::Act
            && ok
            && let Some(prober) = &self.prober
        {
            prober.cleanup_gone(self.sources.as_ref()).await;
        }
        self.gate.gc(now);
        let took = start.elapsed();
        self.finish(&mut st, &pass.plan, &pass.counts, took);
        (pass.plan, took)
    }

    fn finish(&self, st: &mut State, plan: &Plan, counts: &plan::Counts, took: Duration) {
        let done = plan
            .actions
            .iter()
            .filter(|a| a.outcome() == podward_api::housekeeper::v1::Outcome::Done);
        let failed = plan
            .actions
            .iter()
            .filter(|a| a.outcome() == podward_api::housekeeper::v1::Outcome::Failed);
        st.actions_done += done.count() as u64;
        st.actions_failed += failed.count() as u64;
        if plan.sources_ok {
            st.last_success_at_ns = podward_api::time::now_ns();
        }
        st.last_duration = took;
        st.last = Some(plan.clone());
        if let Some(m) = &self.metrics {
            m.record(plan, counts, took);
        }
        let breakdown: Vec<String> = plan
            .sources
            .iter()
            .map(|r| {
                format!(
                    "{}={:?}",
                    r.name,
                    Duration::from_nanos(u64::try_from(r.duration_ns).unwrap_or(0))
                )
            })
            .collect();
        if took > SLOW_PASS {
            tracing::warn!(took = ?took, expected = ?SLOW_PASS, sources = ?breakdown, "housekeeping pass took too long");
        }
        tracing::info!(
            pass = plan.pass,
            took = ?took,
            sources_ok = plan.sources_ok,
            dry_run = plan.dry_run,
            actions = plan.actions.len(),
            findings = plan.findings.len(),
            "pass done"
        );
        for a in &plan.actions {
            tracing::info!(
                kind = a.kind().as_str_name(),
                pod_uid = %a.pod_uid,
                target = %a.target,
                outcome = a.outcome().as_str_name(),
                error = %a.error,
                reason = %a.reason,
                "action"
            );
        }
    }

    /// The last pass and the counters since start.
    pub async fn status(&self) -> StatusResponse {
        let st = self.state.lock().await;
        StatusResponse {
            last_pass: st.last.clone(),
            last_pass_duration_ns: i64::try_from(st.last_duration.as_nanos()).unwrap_or(i64::MAX),
            last_success_at_ns: st.last_success_at_ns,
            passes: st.passes,
            actions_done: st.actions_done,
            actions_failed: st.actions_failed,
        }
    }
}
