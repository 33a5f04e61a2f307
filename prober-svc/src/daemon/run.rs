//! The daemon: API socket, admin endpoint, source and workers, until the shutdown future resolves.
//! No signal handling here (main installs it), so tests and the benchmark run the prober
//! in-process, through [`run_with`] when they need to see or replace a part.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use podward_api::daemon::admin::{Admin, Readiness};
use podward_api::daemon::grpc;
use podward_api::daemon::stop::Stop;
use podward_api::prober::v1::prober_server::ProberServer;
use podward_api::socket::{SocketPerms, serve_unix};

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::consequences::prestop::Hooks;
use crate::daemon::config::{Config, InvalidSetting};
use crate::daemon::service::ProberService;
use crate::direct_exec::DirectExec;
use crate::handler::exec::cri::CriExec;
use crate::handler::host_policy::NodePolicy;
use crate::handler::resolve::{Resolver, ResolverOptions};
use crate::handler::target_budget::{TargetBudget, memory_limit};
use crate::kubernetes::ApiSide;
use crate::kubernetes::lease::{self, LeaseMetrics, LeaseSettings, ProberHealth};
use crate::kubernetes::vouch::Vouch;
use crate::metrics::{Metrics, PROBES_PATH};
use crate::pods::manager::{Manager, Settings};
use crate::probing::probe::{Prober, ProberOptions};
use crate::probing::starvation::TickLag;
use crate::publish::event::{EventSink, Events};
use crate::publish::hub::Hub;
use crate::source::{SourceConfig, follow};
use crate::stopper::{CriStopper, Stopper};
use tokio::task::JoinHandle;

/// Why the prober could not run: the daemons' shared reasons, or a setting that cannot work.
pub type RunError = podward_api::daemon::run::RunError<InvalidSetting>;

/// What an embedding (a test, the benchmark) can set besides the [`Config`].
pub struct Options {
    /// Admin endpoint state (registry, readiness, self-rendered families).
    pub admin: Admin,
    /// How containers are stopped; `None` is CRI `StopContainer` on containerd.
    pub stopper: Option<Arc<dyn Stopper>>,
    /// The prober's clock; its start is the prober's start (restart jitter and grace).
    pub clock: Clock,
    /// Called once with the prober's parts, before it serves.
    pub on_start: Option<Box<dyn FnOnce(Parts) + Send>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            admin: Admin::new(),
            stopper: None,
            clock: Clock::system(),
            on_start: None,
        }
    }
}

/// The running prober's parts, for an embedding to watch.
pub struct Parts {
    /// The probe manager (pods, workers, `Status`).
    pub manager: Manager,
    /// The prober's metrics.
    pub metrics: Metrics,
    /// The admin endpoint's state, with the prober's families added (renders `/metrics` and
    /// `/metrics/probes`).
    pub admin: Admin,
    /// Where the admin endpoint listens (the port chosen when the config asked for port 0).
    pub admin_addr: std::net::SocketAddr,
}

/// Raises the soft limit on open files to the hard limit, as every Go program (kubelet included)
/// does at start since Go 1.19: each in-flight network probe holds a socket, and at tens of
/// thousands of workers the common soft default of 1,024 would turn into "too many open files"
/// probe failures — false failures that can kill healthy containers.
fn raise_open_files() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(limit = n, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
    }
}

/// Runs the prober with `config` until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    run_with(config, Options::default(), shutdown).await
}

/// Runs the prober with `config` and `options` until `shutdown` resolves, in three steps: its
/// parts are built (metrics, listeners, the API side, the manager with its prober and kill path)
/// and handed to `options.on_start`; they run as tasks ([`Tasks::spawn`]); and they are stopped
/// in order ([`Tasks::stop`]).
pub async fn run_with(
    config: Config,
    options: Options,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let Options {
        mut admin,
        stopper,
        clock,
        on_start,
    } = options;
    raise_open_files();
    crate::daemon::allocator::return_large_buffers();
    // Every setting is checked before anything is bound or created, so a setting that cannot
    // work leaves nothing behind (no socket file, no half-started task).
    let api_settings = config.api_settings().map_err(RunError::Daemon)?;
    let lease_settings = config.lease_settings().map_err(RunError::Daemon)?;
    let metrics = register_metrics(&mut admin, &config)?;
    let admin_listener = podward_api::daemon::admin::bind(config.common.admin_addr).await?;
    let admin_addr = admin_listener
        .local_addr()
        .unwrap_or(config.common.admin_addr);
    let api_listener = serve_unix(&config.socket, SocketPerms::default()).await?;
    let node_ip = config.node_ip();
    log_start(&config, admin_addr, node_ip);
    let containerd = podward_api::socket::channel(&config.common.containerd_socket);
    let api = api_side(api_settings, &admin)?;
    let hub = Hub::default();
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![Arc::new(hub.clone())];
    if let Some(api) = &api {
        sinks.extend(api.sinks());
    }
    let stopper = stopper.unwrap_or_else(|| Arc::new(CriStopper::new(containerd.clone())));
    let manager = build_manager(
        &config,
        NodePolicy::new(config.probe_host_policy, node_ip),
        &metrics,
        &containerd,
        Events::new(sinks),
        stopper,
        clock,
    );
    if let Some(f) = on_start {
        f(Parts {
            manager: manager.clone(),
            metrics: metrics.clone(),
            admin: admin.clone(),
            admin_addr,
        });
    }
    let tasks = Tasks::spawn(Running {
        config: &config,
        admin,
        admin_listener,
        api_listener,
        api,
        lease_settings,
        hub,
        manager,
        metrics,
        containerd,
        node_ip,
        clock,
    })?;
    shutdown.await;
    tracing::info!("shutting down");
    let served = tasks.stop().await;
    let _ = std::fs::remove_file(&config.socket);
    served
}

/// The Kubernetes side when the config names a node; without one the prober runs on its own.
fn api_side(
    settings: Option<crate::kubernetes::ApiSettings>,
    admin: &Admin,
) -> Result<Option<ApiSide>, RunError> {
    match settings {
        Some(s) => Ok(Some(ApiSide::new(s, Some(&admin.registry))?)),
        None => {
            tracing::info!(
                "no --node-name (or NODE_NAME): the Kubernetes API is not used (no readiness gate, events or preStop hooks)"
            );
            Ok(None)
        }
    }
}

/// The built parts [`Tasks::spawn`] sets running.
struct Running<'a> {
    config: &'a Config,
    admin: Admin,
    admin_listener: tokio::net::TcpListener,
    api_listener: tokio::net::UnixListener,
    api: Option<ApiSide>,
    lease_settings: Option<LeaseSettings>,
    hub: Hub,
    manager: Manager,
    metrics: Metrics,
    containerd: tonic::transport::Channel,
    node_ip: IpAddr,
    clock: Clock,
}

/// The prober's running tasks, and what stopping them needs.
struct Tasks {
    stop: Stop,
    readiness: Readiness,
    manager: Manager,
    source: JoinHandle<()>,
    api: Option<JoinHandle<()>>,
    lease: Option<JoinHandle<()>>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    admin: JoinHandle<()>,
}

impl Tasks {
    /// Sets every part running: the node lease (with an API side and a lease configured), the API
    /// side, the admin endpoint, the pod source and the gRPC API.
    fn spawn(parts: Running<'_>) -> Result<Self, RunError> {
        let Running {
            config,
            admin,
            admin_listener,
            api_listener,
            api,
            lease_settings,
            hub,
            manager,
            metrics,
            containerd,
            node_ip,
            clock,
        } = parts;
        let stop = Stop::new();
        let mut api = api;
        // With a node lease, `/readyz` is the source's view *and* the lease being current
        // (`lease::ready`); without one, the source's view alone.
        let source_ready = match (&api, &lease_settings) {
            (Some(_), Some(_)) => Readiness::default(),
            _ => admin.readiness.clone(),
        };
        let lease = match (&mut api, lease_settings) {
            (Some(api), Some(settings)) => {
                let health =
                    ProberHealth::new(source_ready.clone(), api.metrics(), settings.duration);
                let vouch = Vouch::new(settings.duration);
                api.set_vouch(vouch.clone());
                tokio::spawn(lease::ready::follow(
                    admin.readiness.clone(),
                    source_ready.clone(),
                    vouch.clone(),
                    stop.subscribe(),
                ));
                Some(lease::spawn(
                    settings,
                    config.kubeconfig.clone(),
                    Arc::new(health),
                    vouch,
                    clock,
                    LeaseMetrics::new(Some(&admin.registry))?,
                    stop.clone(),
                ))
            }
            _ => None,
        };
        let api = api.map(|a| a.spawn(manager.clone(), clock, stop.clone()));
        let readiness = admin.readiness.clone();
        let handshake_timeouts = grpc::handshake_timeouts(&admin.registry, "podward_prober");
        let admin = tokio::spawn(admin.serve(admin_listener, stop.stopped()));
        // `/readyz` follows the source: ready once the prober holds a complete view of the node.
        let source = tokio::spawn(follow(
            SourceConfig {
                shim_socket: config.shim_socket.clone(),
                containerd,
                node_ip,
                poll_interval: Duration::from_secs(config.poll_interval_seconds.max(1)),
                readiness: source_ready,
            },
            manager.clone(),
            metrics,
            stop.stopped(),
        ));
        // Handshake deadline, keepalive and stream bounds shared by every podward gRPC socket
        // (docs/operations.md).
        let api_incoming = grpc::incoming(
            api_listener,
            "api",
            grpc::HANDSHAKE_TIMEOUT,
            handshake_timeouts,
            stop.subscribe(),
        );
        let server = tokio::spawn(
            grpc::server()
                .add_service(ProberServer::new(
                    ProberService::new(manager.clone(), hub)
                        .with_max_subscribers(config.max_subscribers),
                ))
                .serve_with_incoming_shutdown(api_incoming, stop.stopped()),
        );
        Ok(Self {
            stop,
            readiness,
            manager,
            source,
            api,
            lease,
            server,
            admin,
        })
    }

    /// Stops the tasks in order: not ready first, then the source (no new pods), the API side and
    /// the lease (a stopping prober no longer vouches for its conditions), the workers, and last
    /// the servers. Returns how the gRPC server ended.
    async fn stop(self) -> Result<(), RunError> {
        self.readiness.set(false);
        self.stop.trigger();
        let _ = self.source.await;
        if let Some(t) = self.api {
            let _ = t.await;
        }
        if let Some(t) = self.lease {
            let _ = t.await;
        }
        self.manager.stop_all();
        let served = self.server.await;
        let _ = self.admin.await;
        match served {
            Ok(r) => r.map_err(RunError::from),
            Err(_) => Ok(()),
        }
    }
}

/// The prober's metrics, registered on the admin endpoint: the probe families always where
/// kubelet serves its own, and on `/metrics` unless the operator's scraper takes them from there
/// (docs/operations.md, "Metrics").
fn register_metrics(admin: &mut Admin, config: &Config) -> Result<Metrics, RunError> {
    podward_api::daemon::build_info::register(&admin.registry, "prober", env!("CARGO_PKG_VERSION"));
    let metrics = Metrics::new(&admin.registry)?;
    admin.add_page(PROBES_PATH, metrics.probes_page())?;
    if config.metrics_with_probes {
        admin.add_text(metrics.series().clone());
    }
    Ok(metrics)
}

/// One line saying where the prober listens and how it is set up: the first thing to read in
/// a log at 3 a.m.
fn log_start(config: &Config, admin_addr: std::net::SocketAddr, node_ip: IpAddr) {
    tracing::info!(
        socket = %config.socket.display(),
        admin = %admin_addr,
        metrics_with_probes = config.metrics_with_probes,
        shim = %config.shim_socket.display(),
        containerd = %config.common.containerd_socket.display(),
        containerd_namespace = %config.common.containerd_namespace,
        exec_mode = ?config.exec_mode,
        exec_standby = config.exec_standby,
        %node_ip,
        probe_host_policy = %config.probe_host_policy,
        "podward-prober starting"
    );
}

/// The node-wide budget for what probe targets send: the configured size, else a share of the
/// prober's memory limit.
fn target_budget(config: &Config, metrics: &Metrics) -> Arc<TargetBudget> {
    let limit = match config.target_memory_budget_bytes {
        0 => TargetBudget::size_for(memory_limit(std::path::Path::new("/"))),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    tracing::info!(bytes = limit, "budget for what probe targets send");
    TargetBudget::new(limit, Some(metrics.target_memory_bytes.clone()))
}

/// The manager with its prober (the handlers, exec direct or through CRI) and its kill path
/// (preStop hooks, then `stopper`), publishing to `events`.
fn build_manager(
    config: &Config,
    host_policy: NodePolicy,
    metrics: &Metrics,
    containerd: &tonic::transport::Channel,
    events: Events,
    stopper: Arc<dyn Stopper>,
    clock: Clock,
) -> Manager {
    // One resolver for probes and hooks: one bound on the node's lookup threads.
    let resolver = Arc::new(Resolver::new(ResolverOptions::default()));
    let prober = Prober::new(
        ProberOptions {
            kube_version: config.kube_version.clone(),
        },
        Arc::new(DirectExec::with_standby(
            config.exec_mode,
            containerd.clone(),
            config
                .exec_helper
                .clone()
                .unwrap_or_else(|| "/proc/self/exe".into()),
            config.exec_standby,
        )),
    )
    .with_host_policy(host_policy)
    .with_pod_sockets(
        crate::handler::pod_sockets::PER_POD,
        metrics.sockets_held.clone(),
    )
    .with_target_budget(target_budget(config, metrics))
    .with_tls_fallbacks(metrics.tls_fallbacks.clone())
    .with_resolver(resolver.clone());
    // preStop exec hooks go through CRI ExecSync, as kubelet runs them (the direct runner is
    // for probes).
    let exec = Arc::new(CriExec::new(containerd.clone()));
    let hooks = Arc::new(
        Hooks::new(exec, &config.kube_version)
            .with_host_policy(host_policy)
            .with_resolver(resolver),
    );
    let metrics = Arc::new(metrics.clone());
    let killer = Killer::new(stopper, Some(hooks), metrics.clone(), events.clone(), clock);
    let settings = Settings {
        host_policy: Some(host_policy),
        starvation: Some(Arc::new(TickLag::start())),
    };
    Manager::new(Arc::new(prober), killer, events, metrics, clock, settings)
}
