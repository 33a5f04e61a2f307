//! One pass: read the sources, fold the runtime's answer into the orphan history, assess the
//! orphans' pod dirs, plan, and act unless dry-run. Passes that record are serialised (the timer
//! loop and the API's `Reconcile` share one lock); the history and the last pass sit behind
//! another lock that is only ever held for a moment and never across an await, so `Status` and
//! `Plan` answer while a pass reads, walks or acts.

use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::{Plan, StatusResponse};
use podward_api::outside_text::for_terminal;

use crate::act::prober_link::ProberLink;
use crate::act::{self, Actuator};
use crate::clock::Clock;
use crate::decision::assess::Assessor;
use crate::decision::orphan::OrphanTracker;
use crate::decision::plan::{self, PlanSettings};
use crate::decision::uid_gate::UidGate;
use crate::metrics::Metrics;
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
    assessor: Assessor,
    /// Held for the whole of a recording pass (not by `Preview`).
    passes: tokio::sync::Mutex<()>,
    /// Held briefly, never across an await.
    state: parking_lot::Mutex<State>,
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
            assessor: Assessor::new(),
            passes: tokio::sync::Mutex::new(()),
            state: parking_lot::Mutex::new(State {
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

    /// Runs one pass and returns its plan (with outcomes when it acted) and its duration. A
    /// `Preview` runs beside a recording pass, on its own copy of the history.
    pub async fn pass(&self, mode: Mode) -> (Plan, Duration) {
        let _serial = match mode {
            Mode::Preview => None,
            Mode::DryRun | Mode::Act => Some(self.passes.lock().await),
        };
        let start = tokio::time::Instant::now();
        let snapshot = sources::read_all(self.sources.as_ref()).await;
        let now = self.clock.now();
        let ok = snapshot.required_ok();
        if !ok {
            let failed: Vec<String> = snapshot
                .reports
                .iter()
                .filter(|r| !r.ok && !r.optional)
                .map(|r| format!("{}: {}", r.name, r.error))
                .collect();
            tracing::warn!(failed = ?failed, "a required source failed: this pass plans and acts on nothing");
        }
        let observe = |tracker: &mut OrphanTracker| {
            if ok {
                tracker.observe(now, &plan::present(&snapshot), plan::candidates(&snapshot));
            } else {
                // No evidence of absence from a pass that could not read: start counting again.
                tracker.reset();
            }
        };
        // A preview works on a copy; a recording pass on the history itself, which no other
        // recording pass touches meanwhile (`passes`).
        let mut preview = None;
        let to_assess = {
            let mut st = self.state.lock();
            let tracker = if mode == Mode::Preview {
                preview.insert(st.tracker.clone())
            } else {
                &mut st.tracker
            };
            observe(tracker);
            plan::pod_dirs_to_assess(&snapshot, tracker, &self.gate, now)
        };
        let mounts = Arc::new(snapshot.mounts.clone().unwrap_or_default());
        let assessed = self
            .assessor
            .assess_all(to_assess, mounts, self.settings.walk)
            .await;
        let (mut pass, number) = {
            let st = self.state.lock();
            let tracker = preview.as_ref().unwrap_or(&st.tracker);
            let pass = plan::build(snapshot, assessed, tracker, &self.gate, now, &self.settings);
            (pass, st.passes + 1)
        };
        pass.plan.dry_run = mode != Mode::Act;
        pass.plan.pass = number;
        if mode == Mode::Preview {
            return (pass.plan, start.elapsed());
        }
        self.state.lock().passes = number;
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
        // Only an acting pass moves the queue and backs off what was kept, so that a dry run's
        // plan stays what the acting pass after it does. After the act, whose success on
        // another of a UID's things would clear its backoff.
        if mode == Mode::Act {
            for uid in &pass.kept {
                self.gate.kept(uid, now);
            }
            self.state
                .lock()
                .tracker
                .took_turns(pass.turns.iter().map(String::as_str), now);
        }
        self.gate.gc(now);
        let took = start.elapsed();
        self.finish(&pass.plan, &pass.counts, took);
        (pass.plan, took)
    }

    fn finish(&self, plan: &Plan, counts: &plan::Counts, took: Duration) {
        let mut st = self.state.lock();
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
        drop(st);
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
        // Targets, reasons and errors carry names from pods' volumes: escaped for the log line.
        for a in &plan.actions {
            tracing::info!(
                kind = a.kind().as_str_name(),
                pod_uid = %a.pod_uid,
                target = %for_terminal(&a.target),
                outcome = a.outcome().as_str_name(),
                error = %for_terminal(&a.error),
                reason = %for_terminal(&a.reason),
                "action"
            );
        }
    }

    /// The last pass and the counters since start.
    pub async fn status(&self) -> StatusResponse {
        let st = self.state.lock();
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
