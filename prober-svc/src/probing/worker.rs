//! One probe worker per (pod, container, probe type), with kubelet's `worker.go` semantics.
//!
//! The loop: optional start-up jitter, one probe at once, then wait for the next tick of a
//! fixed-rate ticker (missed ticks are dropped, like Go's 1-slot ticker channel, so a probe that
//! overruns its period is followed immediately by one more and the schedule then realigns) or for
//! a manual trigger (readiness right after startup succeeds), which resets the ticker.
//!
//! `do_probe` is a line-by-line port of kubelet's `doProbe` (`pkg/kubelet/prober/worker.go`);
//! `docs/prober.md` lists the semantics and the tests that hold them.
//! What CRI does not carry comes from the Kubernetes API when the prober has the pod's
//! [`crate::model::api_pod::ApiPod`]: the worker exits when the pod's phase is Succeeded or Failed,
//! and when its container exited and will not be restarted (`restartPolicy: Never`, not a
//! sidecar), as kubelet's does. Without it (the API unreachable or not configured):
//! - a worker of an exited container keeps waiting for a new instance and stops only when its
//!   pod goes;
//! - termination (kubelet's DeletionTimestamp) is the shim's `stop_requested_at_ns` on the sandbox
//!   or container (with the API, also the deletion timestamp): liveness/startup publish Success
//!   and stop probing that instance, readiness keeps probing.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::{Instant, MissedTickBehavior};

use self::handle::{PublishedStatus, SpecUpdate, StatusPublisher, WorkerCtl, WorkerKey};
use crate::clock::Clock;
use crate::model::outcome::{Outcome, ProbeResult};
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::probing::pod_view::PodView;
use crate::publish::event::Event;
use crate::spec::{ProbeSpec, ProbeType, StartupGating};
use due::Due;

mod ctx;
mod due;
pub mod handle;
mod record;
mod state;
mod unstarved;

pub use ctx::{Ctx, Sink};
use state::Seen;
pub use state::{Worker, initial_value};
pub use unstarved::{MAX_STARVED_RETRIES, STARVED_LOG_EVERY};

#[cfg(test)]
mod tests;

/// A pod's live view, shared by its workers and replaced whole by the manager (a worker keeps
/// the `Arc` it read while the view's version is unchanged, instead of copying fields).
pub type SharedPod = Arc<PodView>;

/// kubelet's `kubeletRestartGracePeriod`: containers started this long before the prober are
/// treated as having run under a previous prober instance.
pub const RESTART_GRACE: Duration = Duration::from_secs(10);

/// kubelet's restart rule: whether `c` started more than [`RESTART_GRACE`] before this prober
/// (whose start is `clock`'s), i.e. under a previous prober instance. Such a container gets no
/// initial value and keeps being started and ready until a real verdict.
pub fn started_before_restart(c: &ContainerInfo, clock: &Clock) -> bool {
    let grace = i64::try_from(RESTART_GRACE.as_nanos()).unwrap_or(i64::MAX);
    c.started_at_ns > 0 && c.started_at_ns < clock.start_ns().saturating_sub(grace)
}

impl Worker {
    /// A worker for `key` probing with `spec`. `startup` says whether the container's startup
    /// probe gates its liveness and readiness.
    pub fn new(
        key: WorkerKey,
        spec: Arc<ProbeSpec>,
        startup: StartupGating,
        pod: SharedPod,
        ctx: Arc<Ctx>,
    ) -> Self {
        let (metrics, pod_share) = {
            let p = pod.read();
            (
                ctx.metrics
                    .worker(key.ty, &key.container, &p.name, &p.namespace, &p.uid),
                ctx.runner.pod_share(&p.uid),
            )
        };
        Self {
            key,
            spec,
            startup,
            pod,
            ctx,
            ctl: Arc::new(WorkerCtl::default()),
            status: StatusPublisher::default(),
            metrics,
            container_id: None,
            pod_share,
            published: None,
            seen: None,
            last_result: None,
            result_run: 0,
            on_hold: false,
            period_changed: false,
        }
    }

    /// The control handle.
    pub fn ctl(&self) -> Arc<WorkerCtl> {
        self.ctl.clone()
    }

    /// A reader of the status this worker publishes.
    pub fn status(&self) -> PublishedStatus {
        self.status.reader()
    }

    /// Runs until stopped (kubelet's `worker.run`).
    pub async fn run(mut self) {
        let period = self.spec.period.max(Duration::from_millis(1));
        // Spread first probes only when the prober itself just started, so a restart does not
        // fire every probe of the node at once (kubelet's rule).
        if period > self.ctx.clock.since_start() {
            let jitter = period.mul_f64(rand::rng().random::<f64>());
            // Boxed: this wait happens once, and inline its timer would enlarge every idle
            // worker's task for good (30,000 workers are the design point).
            if Box::pin(self.wait_or_stop(Instant::now() + jitter)).await {
                return self.exit();
            }
        }
        let mut ticker = new_ticker(period);
        while self.do_probe().await {
            if self.ctl.stopped() {
                break;
            }
            if std::mem::take(&mut self.period_changed) {
                ticker = ticker_for(&self.spec);
            }
            tokio::select! {
                biased;
                () = self.ctl.woken() => {
                    if self.ctl.stopped() {
                        break;
                    }
                    if self.ctl.take_trigger() {
                        ticker.reset();
                    }
                }
                due = ticker.tick() => {
                    self.ctx.metrics.observe_lateness(Instant::now().saturating_duration_since(due));
                }
            }
        }
        self.exit();
    }

    /// Applies a spec update, if one is pending: new spec, threshold count restarted (kubelet's
    /// `MutableContainerProbes`); the published result and the on-hold state stay, since the
    /// container instance is the same.
    fn take_update(&mut self) {
        let Some(SpecUpdate { spec, startup }) = self.ctl.take_update() else {
            return;
        };
        self.period_changed = spec.period != self.spec.period;
        self.spec = spec;
        self.startup = startup;
        self.last_result = None;
        self.result_run = 0;
    }

    /// Sleeps until `until`; true if stopped meanwhile.
    async fn wait_or_stop(&self, until: Instant) -> bool {
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return self.ctl.stopped(),
                () = self.ctl.woken() => {
                    if self.ctl.stopped() {
                        return true;
                    }
                }
            }
        }
    }

    fn exit(self) {
        if let Some(id) = &self.container_id {
            self.ctx.results.remove(id, self.key.ty);
        }
        self.metrics.remove();
        self.ctx.sink.exited(&self.key, &self.ctl);
    }

    /// Publishes `result` (kubelet's results-manager update): into the cache, and as an event
    /// when it changed.
    fn set(&mut self, pod: &PodInfo, c: &ContainerInfo, result: ProbeResult, output: &str) {
        if !self
            .ctx
            .results
            .set_memo(&mut self.published, &c.id, self.key.ty, result)
        {
            return;
        }
        let at_ns = self.ctx.clock.now_ns();
        self.status.update(|st| {
            st.result = Some(result);
            st.last_transition_at_ns = at_ns;
        });
        tracing::info!(pod = %pod.name, namespace = %pod.namespace, container = %c.name,
            container_id = %c.id, probe = self.key.ty.name(), result = ?result, "probe result changed");
        self.ctx.events.publish(Event::result(
            pod,
            c,
            self.key.ty,
            result,
            output.to_owned(),
            at_ns,
        ));
    }

    /// Publishes one probe run kubelet records as an event (failed, errored, warned).
    fn probed(&self, pod: &PodInfo, c: &ContainerInfo, probed: Outcome) {
        let at_ns = self.ctx.clock.now_ns();
        self.ctx
            .events
            .publish(Event::probed(pod, c, self.key.ty, probed, at_ns));
    }

    /// Whether `c` counts as started (kubelet's `isContainerStarted`).
    fn is_started(&self, c: &ContainerInfo) -> bool {
        if c.state != RunState::Running {
            return false;
        }
        if self.startup == StartupGating::Ungated {
            return true;
        }
        match self.ctx.results.get(&c.id, ProbeType::Startup) {
            Some(r) => r == ProbeResult::Success,
            // No startup result: a container that ran before the prober started is taken as
            // started (kubelet keeps Started across its own restart).
            None => self.started_before_restart(c),
        }
    }

    fn started_before_restart(&self, c: &ContainerInfo) -> bool {
        started_before_restart(c, &self.ctx.clock)
    }

    /// One step of the state machine (kubelet's `doProbe`); false ends the worker.
    async fn do_probe(&mut self) -> bool {
        self.take_update();
        // The view is moved out for the step and put back after, so the step reads it without
        // touching its reference count.
        let seen = self.seen_now();
        let go_on = self.do_probe_in(&seen).await;
        self.seen = Some(seen);
        go_on
    }

    /// [`Worker::do_probe`] on the view `seen`.
    async fn do_probe_in(&mut self, seen: &Seen) -> bool {
        let pod = &seen.pod;
        if pod.api.as_ref().is_some_and(|a| a.finished()) {
            return false; // kubelet: the pod's phase is Succeeded or Failed
        }
        let Some(c) = &seen.container else {
            return true; // no instance yet: keep waiting
        };
        self.follow_instance(pod, c);
        let ip = match self.due(pod, c) {
            Due::Probe(ip) => ip,
            Due::Wait => return true,
            Due::Exit => return false,
        };
        let Some((outcome, took)) = self.run_unstarved(pod, c, ip).await else {
            return true;
        };
        // Termination may have begun while the probe ran (the app's TERM handler is often what
        // made it fail): kubelet stops liveness and startup at termination and never acts on a
        // result that lands after, so this one is dropped as if the probe had not run. With the
        // view unchanged there is nothing new to see: `due` found it not terminating.
        if self.pod.version() != seen.version {
            let latest = self.pod.read().clone();
            let same = latest
                .current(&self.key.container)
                .filter(|now| now.id == c.id);
            if same.is_some_and(|now| self.hold_for_termination(&latest, now)) {
                return true;
            }
        }
        let Some((result, output)) = self.count(pod, c, outcome, took) else {
            return true;
        };
        let below = match result {
            ProbeResult::Success => self.result_run < self.spec.success_threshold,
            _ => self.result_run < self.spec.failure_threshold,
        };
        if !below {
            self.reach_threshold(pod, c, result, &output);
        }
        true
    }

    /// The pod's current view and this worker's container in it ([`PodInfo::current`]): the
    /// one kept from the last tick while its version is current, else read again.
    fn seen_now(&mut self) -> Seen {
        // Loaded before the read: a view read after it is at least this new, so a copy is never
        // taken for current when it is not.
        let version = self.pod.version();
        match self.seen.take() {
            Some(seen) if seen.version == version => seen,
            _ => {
                let pod = self.pod.read().clone();
                let container = pod.current(&self.key.container).cloned();
                Seen {
                    version,
                    pod,
                    container,
                }
            }
        }
    }

    /// Counts one probe's outcome (metrics, status, the run of equal results) and publishes
    /// what kubelet records of it; `None` for an errored probe, which is discarded.
    fn count(
        &mut self,
        pod: &PodInfo,
        c: &ContainerInfo,
        outcome: Outcome,
        took: Duration,
    ) -> Option<(ProbeResult, String)> {
        let (result, output) = match outcome {
            Outcome::Errored(message) => {
                self.errored(pod, c, message.clone());
                self.probed(pod, c, Outcome::Errored(message));
                return None;
            }
            Outcome::Warning(output) => {
                tracing::debug!(pod = %pod.name, container = %c.name, probe = self.key.ty.name(),
                    output = %output, "probe warning");
                self.probed(pod, c, Outcome::Warning(output.clone()));
                (ProbeResult::Success, output)
            }
            Outcome::Success(output) => (ProbeResult::Success, output),
            Outcome::Failure(output) => (ProbeResult::Failure, output),
        };
        if result == ProbeResult::Success {
            self.metrics.success(took);
        } else {
            self.metrics.failed();
            tracing::debug!(pod = %pod.name, container = %c.name, probe = self.key.ty.name(),
                output = %output, "probe failed");
            self.probed(pod, c, Outcome::Failure(output.clone()));
        }
        if self.last_result == Some(result) {
            self.result_run = self.result_run.saturating_add(1);
        } else {
            self.last_result = Some(result);
            self.result_run = 1;
        }
        self.record(result, &output);
        Some((result, output))
    }

    /// The run of equal results reached its threshold: publish the result; a liveness failure
    /// or any startup result holds the worker until a new instance, and goes to the manager (a
    /// kill, or a readiness trigger).
    fn reach_threshold(
        &mut self,
        pod: &PodInfo,
        c: &ContainerInfo,
        result: ProbeResult,
        output: &str,
    ) {
        self.status.update(|st| st.reached_threshold = true);
        self.set(pod, c, result, output);
        if !((self.key.ty == ProbeType::Liveness && result == ProbeResult::Failure)
            || self.key.ty == ProbeType::Startup)
        {
            return;
        }
        self.on_hold = true;
        self.result_run = 0;
        self.status.update(|st| st.on_hold = true);
        // A worker stopped meanwhile (its probe removed or refused, its pod gone) never
        // kills: its probe is no longer the pod's.
        if result == ProbeResult::Failure && !self.ctl.stopped() {
            self.ctx
                .sink
                .threshold_failure(&self.key, pod, c, &self.spec, output);
        } else if result != ProbeResult::Failure {
            self.ctx.sink.started(&self.key);
        }
    }
}

/// A fixed-rate ticker for `period`, first tick one period from now; missed ticks are dropped
/// (Go's ticker with its 1-slot channel).
fn new_ticker(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval_at(Instant::now() + period, period);
    t.set_missed_tick_behavior(MissedTickBehavior::Skip);
    t
}

fn ticker_for(spec: &ProbeSpec) -> tokio::time::Interval {
    new_ticker(spec.period.max(Duration::from_millis(1)))
}
