//! Test doubles shared by the crate's unit tests, and the manager wired as `run` wires it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};
use crate::metrics::Metrics;
use crate::model::outcome::Outcome;
use crate::model::{ContainerInfo, RunState};
use crate::pods::manager::{Manager, Settings};
use crate::probing::runner::ProbeRunner;
use crate::publish::event::Events;
use crate::publish::hub::Hub;
use crate::spec::{ProbeSpec, ProbeType};
use crate::stopper::{StopError, Stopper};

/// A probe runner whose probes never finish and a stopper that accepts every stop: for tests of
/// the plumbing around workers (API, sources), where no verdict must ever arrive.
pub(crate) struct Never;

impl ProbeRunner for Never {
    fn run<'a>(
        &'a self,
        _: ProbeType,
        _: &'a ProbeSpec,
        _: IpAddr,
        _: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(std::future::pending())
    }
}

impl Stopper for Never {
    fn stop_container(&self, _: String, _: i64) -> BoxFuture<'_, Result<(), StopError>> {
        Box::pin(async { Ok(()) })
    }
}

/// An exec runner whose every command succeeds with no output, at once: for tests that are not
/// about exec.
pub(crate) struct NoExec;

impl ExecRunner for NoExec {
    fn exec_sync(
        &self,
        _: &str,
        _: Vec<String>,
        _: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async { Ok(ExecOutput::default()) })
    }
}

/// A manager over `runner` and `stopper` whose events go to `hub`, with unregistered metrics.
pub(crate) fn manager(
    runner: Arc<dyn ProbeRunner>,
    stopper: Arc<dyn Stopper>,
    hub: &Hub,
    clock: Clock,
) -> Manager {
    let metrics = Arc::new(Metrics::unregistered().expect("metrics"));
    manager_metered(runner, stopper, hub, clock, metrics)
}

/// [`manager`] counting in `metrics`, for tests that read them.
pub(crate) fn manager_metered(
    runner: Arc<dyn ProbeRunner>,
    stopper: Arc<dyn Stopper>,
    hub: &Hub,
    clock: Clock,
    metrics: Arc<Metrics>,
) -> Manager {
    let events = Events::new(vec![Arc::new(hub.clone())]);
    let killer = Killer::new(stopper, None, metrics.clone(), events.clone(), clock);
    Manager::new(runner, killer, events, metrics, clock, Settings::default())
}

/// A running container `id` named "app", first attempt, with no ports, env or grace of its own.
pub(crate) fn running_app(id: &str) -> ContainerInfo {
    ContainerInfo {
        id: Arc::from(id),
        name: "app".into(),
        attempt: 0,
        state: RunState::Running,
        created_at_ns: 1,
        started_at_ns: 1,
        ports: Arc::from([]),
        env: Arc::from([]),
        pod_grace_seconds: None,
        stop_requested_at_ns: 0,
    }
}
