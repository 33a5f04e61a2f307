//! The daemon: the API socket, the admin endpoint and the pass timer, until `shutdown`.

use std::future::Future;
use std::sync::Arc;

use podward_api::daemon::admin::Admin;
use podward_api::daemon::grpc;
use podward_api::daemon::stop::Stop;
use podward_api::housekeeper::v1::housekeeper_server::HousekeeperServer;
use podward_api::socket::{SocketPerms, serve_unix};

use crate::act::NodeActuator;
use crate::act::prober_link::ProberLink;
use crate::clock::MonotonicClock;
use crate::config::{Config, RootError, check_roots};
use crate::decision::plan::PlanSettings;
use crate::metrics::Metrics;
use crate::node::cgroup::systemd::SystemdClient;
use crate::reconcile::{Mode, Reconciler};
use crate::service::Service;
use crate::sources::NodeSources;

/// Why the daemon could not start: the daemons' shared reasons, or a root flag that points at
/// something the housekeeper must not clean under.
pub type RunError = podward_api::daemon::run::RunError<RootError>;

/// The planner's settings for `config`.
pub fn plan_settings(config: &Config) -> PlanSettings {
    PlanSettings {
        kubelet_root: config.kubelet_root.clone(),
        remove_exited_containers: config.remove_exited_containers,
        orphan_grace: config.orphan_grace,
        walk: config.walk_bounds(),
    }
}

/// The real reconciler for `config` (also used by `plan --local`).
pub fn node_reconciler(config: &Config) -> Reconciler<NodeSources, NodeActuator> {
    let sources = NodeSources::new(config);
    let systemd = SystemdClient::new(config.systemd_bus.clone());
    let actuator = NodeActuator::new(sources.runtime_client().clone(), Arc::new(systemd))
        .with_walk_bounds(config.walk_bounds());
    Reconciler::new(
        Arc::new(sources),
        Arc::new(actuator),
        Arc::new(MonotonicClock::new()),
        plan_settings(config),
    )
}

/// Runs the housekeeper until `shutdown` resolves. Never installs signal handlers (the caller
/// passes `podward_api::daemon::signal::shutdown()`), so tests run it in-process. Refuses to
/// start, before serving anything, when a root is unusable ([`check_roots`]). Peers (containerd,
/// shim, prober) may be down: passes then report the failed source and act on nothing, and the
/// clients reconnect by themselves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    check_roots(&config).map_err(RunError::Daemon)?;
    let admin = Admin::new();
    podward_api::daemon::build_info::register(
        &admin.registry,
        "housekeeper",
        env!("CARGO_PKG_VERSION"),
    );
    let metrics = Metrics::register(&admin.registry)?;
    let reconciler = Arc::new(
        node_reconciler(&config)
            .with_metrics(metrics)
            .with_prober(ProberLink::new(&config.prober_socket)),
    );
    let admin_listener = podward_api::daemon::admin::bind(config.common.admin_addr).await?;
    let listener = serve_unix(&config.socket, SocketPerms::default()).await?;
    log_start(&config);

    let stop = Stop::new();
    let readiness = admin.readiness.clone();
    let handshake_timeouts = grpc::handshake_timeouts(&admin.registry, "podward_housekeeper");
    let admin_task = tokio::spawn(admin.serve(admin_listener, stop.stopped()));
    let api = HousekeeperServer::new(Service::new(reconciler.clone(), config.dry_run));
    // Handshake deadline, keepalive and stream bounds shared by every podward gRPC socket
    // (docs/operations.md).
    let incoming = grpc::incoming(
        listener,
        "api",
        grpc::HANDSHAKE_TIMEOUT,
        handshake_timeouts,
        stop.subscribe(),
    );
    let server = tokio::spawn(
        grpc::server()
            .add_service(api)
            .serve_with_incoming_shutdown(incoming, stop.stopped()),
    );
    readiness.set(true);

    let mode = if config.dry_run {
        Mode::DryRun
    } else {
        Mode::Act
    };
    let mut ticker =
        tokio::time::interval(config.interval.max(std::time::Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = async { ticker.tick().await; reconciler.pass(mode).await } => {}
        }
    }
    readiness.set(false);
    stop.trigger();
    let served = server.await;
    let _ = admin_task.await;
    let _ = std::fs::remove_file(&config.socket);
    tracing::info!("podward-housekeeper stopped");
    match served {
        Ok(r) => Ok(r?),
        Err(e) => {
            tracing::warn!(error = %e, "API server task ended abnormally");
            Ok(())
        }
    }
}

/// Says at start what the daemon serves and whether its passes act.
fn log_start(config: &Config) {
    tracing::info!(
        socket = %config.socket.display(),
        admin = %config.common.admin_addr,
        containerd = %config.common.containerd_socket.display(),
        namespace = %config.common.containerd_namespace,
        cgroup_driver = ?config.cgroup_driver,
        interval = ?config.interval,
        orphan_grace = ?config.orphan_grace,
        dry_run = config.dry_run,
        "podward-housekeeper serving"
    );
    if config.dry_run {
        tracing::info!(
            "dry run: passes plan and report, and change nothing; start with --act to let them act"
        );
    } else {
        tracing::warn!(
            kubelet_root = %config.kubelet_root.display(),
            log_root = %config.log_root.display(),
            cgroup_root = %config.cgroup_root.display(),
            "acting (--act): passes kill and remove orphaned pod cgroups, pod and log directories \
             and leaked sandboxes"
        );
    }
}
