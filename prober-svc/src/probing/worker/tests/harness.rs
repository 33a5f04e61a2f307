//! Fakes at the two seams (probe runner, killer) and a node builder.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::consequences::prestop::{HookError, HookRan, HookRunner};
use crate::metrics::Metrics;
use crate::model::api_pod::{ApiContainer, ApiPod, ContainerKind, Hook, PodPhase, RestartPolicy};
use crate::model::outcome::Outcome;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::pods::manager::{Manager, Settings};
use crate::probing::runner::ProbeRunner;
use crate::publish::event::{Event, EventSink, Events};
use crate::publish::hub::Hub;
use crate::spec::{ProbeSpec, ProbeType};
use crate::stopper::{StopError, Stopper};

/// Wall time of the test clock's start.
pub(super) const T0: i64 = 1_000_000 * 1_000_000_000;

/// A probe call the fake saw.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub(super) container_id: String,
    pub(super) ty: ProbeType,
    pub(super) at: Instant,
}

/// What the fake answers for (container name, type): an outcome and how long the probe takes.
#[derive(Clone)]
struct Answer {
    outcome: Outcome,
    takes: Duration,
}

/// A scripted probe runner: answers per (container name, probe type), queued answers first.
#[derive(Default)]
pub(super) struct Script {
    answers: Mutex<HashMap<(String, ProbeType), Answer>>,
    queued: Mutex<HashMap<(String, ProbeType), Vec<Outcome>>>,
    pub(super) calls: Mutex<Vec<Call>>,
    in_flight: AtomicUsize,
    pub(super) max_in_flight: AtomicUsize,
}

pub(super) fn success() -> Outcome {
    Outcome::Success("ok".into())
}

pub(super) fn failure() -> Outcome {
    Outcome::Failure("cat: can't open '/tmp/health'".into())
}

pub(super) fn success_with_warning() -> Outcome {
    Outcome::Warning(
        "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>.".into(),
    )
}

pub(super) fn errored() -> Outcome {
    Outcome::Errored("strconv.Atoi: parsing \"http\": invalid syntax".into())
}

impl Script {
    /// From now on, probes of (name, ty) return `v` and take `takes`.
    pub(super) fn set(&self, name: &str, ty: ProbeType, v: Outcome, takes: Duration) {
        self.answers
            .lock()
            .insert((name.into(), ty), Answer { outcome: v, takes });
    }

    /// The next probes of (name, ty) return these, in order, before the standing answer.
    pub(super) fn queue(&self, name: &str, ty: ProbeType, vs: Vec<Outcome>) {
        self.queued.lock().insert((name.into(), ty), vs);
    }

    /// Calls of type `ty` so far.
    pub(super) fn calls_of(&self, ty: ProbeType) -> Vec<Call> {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.ty == ty)
            .cloned()
            .collect()
    }
}

impl ProbeRunner for Script {
    fn run<'a>(
        &'a self,
        ty: ProbeType,
        _spec: &'a ProbeSpec,
        _host_ip: IpAddr,
        c: &'a ContainerInfo,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            self.calls.lock().push(Call {
                container_id: c.id.to_string(),
                ty,
                at: Instant::now(),
            });
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let key = (c.name.clone(), ty);
            let queued = {
                let mut q = self.queued.lock();
                q.get_mut(&key)
                    .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
            };
            let answer = self.answers.lock().get(&key).cloned().unwrap_or(Answer {
                outcome: success(),
                takes: Duration::ZERO,
            });
            if !answer.takes.is_zero() {
                tokio::time::sleep(answer.takes).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            queued.unwrap_or(answer.outcome)
        })
    }
}

/// A stopper that records (container ID, grace) and when.
#[derive(Default)]
pub(super) struct Kills {
    pub(super) done: Mutex<Vec<(String, i64)>>,
    pub(super) at: Mutex<Vec<Instant>>,
}

impl Stopper for Kills {
    fn stop_container(
        &self,
        container_id: String,
        grace_seconds: i64,
    ) -> BoxFuture<'_, Result<(), StopError>> {
        self.done.lock().push((container_id, grace_seconds));
        self.at.lock().push(Instant::now());
        Box::pin(async { Ok(()) })
    }
}

/// A hook runner that takes `takes` and then answers `fails` (or success, over the HTTP
/// fallback to `fallback` when set); records its runs.
#[derive(Default)]
pub(super) struct Hooks {
    pub(super) takes: Mutex<Duration>,
    pub(super) fails: Mutex<bool>,
    pub(super) fallback: Mutex<Option<String>>,
    /// (container ID, hook, timeout, when it began).
    pub(super) runs: Mutex<Vec<(String, Hook, Duration, Instant)>>,
}

impl HookRunner for Hooks {
    fn run<'a>(
        &'a self,
        hook: &'a Hook,
        _pod: &'a PodInfo,
        c: &'a ContainerInfo,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<HookRan, HookError>> {
        self.runs
            .lock()
            .push((c.id.to_string(), hook.clone(), timeout, Instant::now()));
        let takes = *self.takes.lock();
        let fails = *self.fails.lock();
        let fallback = self.fallback.lock().clone();
        Box::pin(async move {
            tokio::time::sleep(takes).await;
            if fails {
                Err(HookError::Invalid("scripted failure".into()))
            } else if let Some(host) = fallback {
                Ok(HookRan::HttpFallback { host })
            } else {
                Ok(HookRan::AsWritten)
            }
        })
    }
}

/// Every event the manager and the kill path publish, in order.
#[derive(Default)]
pub(super) struct Seen(pub(super) Mutex<Vec<Event>>);

impl EventSink for Seen {
    fn publish(&self, event: &Event) {
        self.0.lock().push(event.clone());
    }
}

/// A manager with fakes; the prober "started" `uptime` ago (so no start-up jitter when that
/// exceeds every period).
pub(super) struct Node {
    pub(super) manager: Manager,
    pub(super) script: Arc<Script>,
    pub(super) kills: Arc<Kills>,
    pub(super) hooks: Arc<Hooks>,
    pub(super) seen: Arc<Seen>,
    pub(super) clock: Clock,
    pub(super) hub: Hub,
    pub(super) metrics: Arc<Metrics>,
}

impl Node {
    pub(super) async fn started(uptime: Duration) -> Node {
        Self::started_with(uptime, Settings::default).await
    }

    /// [`Node::started`] with the node's probing settings, made once the prober's uptime has
    /// passed.
    pub(super) async fn started_with(
        uptime: Duration,
        settings: impl FnOnce() -> Settings,
    ) -> Node {
        let clock = Clock::starting_at(T0);
        tokio::time::advance(uptime).await;
        let script = Arc::new(Script::default());
        let kills = Arc::new(Kills::default());
        let hooks = Arc::new(Hooks::default());
        let seen = Arc::new(Seen::default());
        let hub = Hub::new(1024);
        let metrics = Arc::new(Metrics::unregistered().expect("metrics"));
        let events = Events::new(vec![Arc::new(hub.clone()), seen.clone()]);
        let killer = Killer::new(
            kills.clone(),
            Some(hooks.clone()),
            metrics.clone(),
            events.clone(),
            clock,
        );
        let manager = Manager::new(
            script.clone(),
            killer,
            events,
            metrics.clone(),
            clock,
            settings(),
        );
        Node {
            manager,
            script,
            kills,
            hooks,
            seen,
            clock,
            hub,
            metrics,
        }
    }

    /// A node whose prober has been up long enough for no jitter.
    pub(super) async fn steady() -> Node {
        Self::started(Duration::from_secs(1000)).await
    }

    /// [`Node::steady`] with the node's probing settings.
    pub(super) async fn steady_with(settings: impl FnOnce() -> Settings) -> Node {
        Self::started_with(Duration::from_secs(1000), settings).await
    }

    pub(super) fn result(&self, id: &str, ty: ProbeType) -> Option<ProbeResult> {
        self.manager.view().results().get(id, ty)
    }

    /// (started, ready, live) of container `name` in pod `uid` from the Status API.
    pub(super) fn flags(&self, uid: &str, name: &str) -> (bool, bool, bool) {
        let st = self.manager.view().status(Some(uid));
        let c = st
            .pods
            .first()
            .and_then(|p| p.containers.iter().find(|c| c.name == name))
            .cloned()
            .expect("container in status");
        (c.started, c.ready, c.live)
    }
}

/// A running container started `ago` before the clock's now.
pub(super) fn running(
    clock: &Clock,
    id: &str,
    name: &str,
    attempt: u32,
    ago: Duration,
) -> ContainerInfo {
    let started = clock.now_ns() - i64::try_from(ago.as_nanos()).expect("ns");
    ContainerInfo {
        id: id.into(),
        name: name.into(),
        attempt,
        state: RunState::Running,
        created_at_ns: started - 1,
        started_at_ns: started,
        ports: Vec::new().into(),
        env: Vec::new().into(),
        pod_grace_seconds: Some(30),
        stop_requested_at_ns: 0,
    }
}

/// A pod with `annotation` and `containers`.
pub(super) fn pod(uid: &str, annotation: &str, containers: Vec<ContainerInfo>) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        sandbox_id: format!("sb-{uid}"),
        sandbox_created_at_ns: 1,
        ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        probes_annotation: Some(annotation.into()),
        stop_requested_at_ns: 0,
        containers: containers
            .into_iter()
            .map(|c| (c.id.to_string(), Arc::new(c)))
            .collect::<BTreeMap<_, _>>(),
        api: None,
    }
}

/// The API's view of `pod` (same UID, name and namespace) with `policy`, the containers'
/// kinds and hooks, and `annotation` as the API's copy.
pub(super) fn api_pod(
    pod: &PodInfo,
    policy: RestartPolicy,
    annotation: Option<&str>,
    containers: Vec<(&str, ContainerKind, Option<Hook>)>,
) -> ApiPod {
    ApiPod {
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        resource_version: "1".into(),
        restart_policy: policy,
        phase: PodPhase::Running,
        deleting: false,
        grace_seconds: Some(30),
        deletion_grace_seconds: None,
        probes_annotation: annotation.map(str::to_owned),
        gated: true,
        condition: None,
        containers: containers
            .into_iter()
            .map(|(name, kind, pre_stop)| ApiContainer {
                name: name.into(),
                kind,
                pre_stop,
                spec_probes: Vec::new(),
                moved_probes: Vec::new(),
            })
            .collect(),
    }
}

/// Lets paused time run for `d` (tokio auto-advances while every task is idle).
pub(super) async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

pub(super) const S: Duration = Duration::from_secs(1);
pub(super) const MS: Duration = Duration::from_millis(1);
