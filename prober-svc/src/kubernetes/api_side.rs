//! The API side as the daemon starts it: the clients, the pod reflector feeding the manager, the
//! readiness-gate writer and the event recorder, wired from one [`ApiSettings`].

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use podward_api::backoff::Backoff;
use podward_api::daemon::stop::Stop;
use prometheus::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::kubernetes::client::{self, Deadlines};
use crate::kubernetes::events::{self, EventQueue};
use crate::kubernetes::gate::{Gate, KubeWriter};
use crate::kubernetes::limit::TokenBucket;
use crate::kubernetes::metrics::ApiMetrics;
use crate::kubernetes::pods::{self, PodSink};
use crate::kubernetes::vouch;
use crate::metrics::MetricsError;
use crate::model::api_pod::ApiPod;
use crate::pods::manager::Manager;
use crate::publish::event::{Event, EventSink};

/// How the prober uses the Kubernetes API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    /// This node's name (`spec.nodeName` of its pods; the events' reporting instance).
    pub node_name: String,
    /// A kubeconfig file; `None`: the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Requests per second of the main client (pods, status), kubelet's `--kube-api-qps`.
    pub qps: f64,
    /// Burst of the main client, kubelet's `--kube-api-burst`.
    pub burst: u32,
    /// Requests per second of the event client, kubelet's `--event-qps`.
    pub event_qps: f64,
    /// Burst of the event client, kubelet's `--event-burst`.
    pub event_burst: u32,
    /// The readiness-gate condition type the prober owns.
    pub gate_condition: String,
}

/// The API side, built before the manager (its sinks take the manager's events) and started
/// with it.
pub struct ApiSide {
    settings: ApiSettings,
    gate: Gate,
    events: EventQueue,
    events_rx: mpsc::Receiver<Event>,
    metrics: ApiMetrics,
}

impl ApiSide {
    /// The API side for `settings`, its metrics in `registry`.
    pub fn new(settings: ApiSettings, registry: Option<&Registry>) -> Result<Self, MetricsError> {
        let metrics = ApiMetrics::new(registry)?;
        let (events, events_rx) = EventQueue::new(metrics.clone());
        Ok(Self {
            gate: Gate::new(&settings.gate_condition, metrics.clone()),
            settings,
            events,
            events_rx,
            metrics,
        })
    }

    /// The gate writer leaves the sentinel's `False` alone while `vouch` (this prober's node
    /// lease) is not current.
    pub fn set_vouch(&mut self, vouch: vouch::Vouch) {
        self.gate.set_vouch(vouch);
    }

    /// The API side's metrics (the node lease's health reads the reflector's and the gate
    /// writer's).
    pub fn metrics(&self) -> ApiMetrics {
        self.metrics.clone()
    }

    /// The event sinks to add beside the `Watch` hub: the gate (result changes) and the
    /// recorder (what kubelet records as events).
    pub fn sinks(&self) -> Vec<Arc<dyn EventSink>> {
        vec![Arc::new(self.gate.clone()), Arc::new(self.events.clone())]
    }

    /// Connects (retrying until the configuration loads) and runs the reflector, the gate
    /// writer and the recorder until `stop` is triggered.
    pub fn spawn(self, manager: Manager, clock: Clock, stop: Stop) -> JoinHandle<()> {
        tokio::spawn(async move {
            let Self {
                settings,
                gate,
                events: _,
                events_rx,
                metrics,
            } = self;
            let clients = tokio::select! {
                () = stop.stopped() => return,
                clients = connect(&settings) => clients,
            };
            tracing::info!(node = %settings.node_name, condition = %settings.gate_condition,
                qps = settings.qps, burst = settings.burst,
                "following the node's pods in the Kubernetes API");
            let sink = Reflected {
                manager: manager.clone(),
                gate: gate.clone(),
                metrics: metrics.clone(),
            };
            let pods_api: kube::Api<Pod> = kube::Api::all(clients.pods);
            let reflector = async {
                pods::reflect(
                    pods_api,
                    &settings.node_name,
                    &settings.gate_condition,
                    &sink,
                    &metrics,
                    stop.stopped(),
                )
                .await;
            };
            let writer = gate.clone().run(
                Arc::new(KubeWriter::new(clients.status)),
                Arc::new(manager.view().clone()),
                clock,
                stop.stopped(),
            );
            let recorder = events::run(
                events_rx,
                clients.events,
                events::RecorderConfig::new(&settings.node_name),
                metrics.clone(),
                stop.stopped(),
            );
            tokio::join!(reflector, writer, recorder);
        })
    }
}

/// The clients of the API side: the reflector's, the gate writer's (both on kubelet's
/// `--kube-api-qps` bucket) and the recorder's (`--event-qps`); each its own connections.
struct Clients {
    pods: kube::Client,
    status: kube::Client,
    events: kube::Client,
}

/// The clients; retries (with backoff, logging the first failure) until the configuration
/// loads.
async fn connect(settings: &ApiSettings) -> Clients {
    let mut backoff = Backoff::new(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
        0.2,
    );
    let mut logged = false;
    loop {
        let clients = async {
            let config = client::load_config(settings.kubeconfig.as_deref()).await?;
            let main = Arc::new(TokenBucket::new(settings.qps, settings.burst));
            Ok::<_, client::ClientError>(Clients {
                pods: client::build(config.clone(), main.clone(), Deadlines::watches())?,
                status: client::build(config.clone(), main, Deadlines::writes())?,
                events: client::build(
                    config,
                    Arc::new(TokenBucket::new(settings.event_qps, settings.event_burst)),
                    Deadlines::writes(),
                )?,
            })
        };
        match clients.await {
            Ok(c) => return c,
            Err(e) if !logged => {
                tracing::error!(error = %e,
                    "no Kubernetes API client; readiness gates, events and preStop hooks wait for one (probes and kills go on)");
                logged = true;
            }
            Err(e) => tracing::debug!(error = %e, "no Kubernetes API client yet"),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// The reflector's view into the manager (probes, kills) and the gate (conditions).
struct Reflected {
    manager: Manager,
    gate: Gate,
    metrics: ApiMetrics,
}

impl PodSink for Reflected {
    fn apply(&self, pod: ApiPod) {
        // The manager first: the gate looks at the pod again as soon as it hears of it, and
        // must then see the readiness this view implies (a removed annotation, a finished pod).
        let gate_view = pod.clone();
        self.manager.set_api_pod(pod);
        self.gate.api_pod(&gate_view);
        self.count();
    }

    fn delete(&self, uid: &str) {
        self.gate.api_gone(uid);
        self.manager.remove_api_pod(uid);
        self.count();
    }

    fn known(&self) -> Vec<String> {
        self.manager.registry().api_pod_uids()
    }
}

impl Reflected {
    fn count(&self) {
        self.metrics
            .pods
            .set(i64::try_from(self.manager.registry().api_pod_count()).unwrap_or(i64::MAX));
    }
}
