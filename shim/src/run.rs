//! Wiring: sockets, the upstream connection, the decoder, the event stream, the rebuild loop,
//! the control API and the admin endpoint, all stopped by one shutdown signal.

use std::future::Future;
use std::path::{Path, PathBuf};

use podward_api::daemon::admin::Admin;
use podward_api::daemon::stop::Stop;
use podward_api::socket::{SocketError, SocketPerms, activated_listeners, serve_unix};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use crate::config::Config;
use crate::fault::Faults;
use crate::forward::{Proxy, Upstream};
use crate::lifecycle_api::LifecycleApi;
use crate::metrics::{Metrics, MetricsError};
use crate::publish::Publisher;
use crate::{events, observe, rebuild};

/// Why the shim could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A socket could not be served.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The admin endpoint could not be bound.
    #[error(transparent)]
    Admin(#[from] podward_api::daemon::admin::BindError),
    /// Metrics registration failed.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The control API server failed.
    #[error("control API: {0}")]
    Control(#[from] tonic::transport::Error),
}

/// What an embedding (a test, mostly) can set besides the [`Config`].
pub struct Options {
    /// Admin endpoint state (registry and readiness); tests read both.
    pub admin: Admin,
    /// Armed faults (only effective with the `fault-injection` feature).
    pub faults: Faults,
    /// Wall clock as Unix nanoseconds.
    pub clock: fn() -> i64,
    /// Called once with the publisher, before serving (tests inspect the index directly).
    pub on_publisher: Option<Box<dyn FnOnce(Publisher) + Send>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            admin: Admin::new(),
            faults: Faults::default(),
            clock: podward_api::time::now_ns,
            on_publisher: None,
        }
    }
}

/// Runs the shim until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    run_with(config, Options::default(), shutdown).await
}

/// A socket we created (and so remove on exit), or one systemd owns.
struct Served {
    listener: UnixListener,
    created: Option<PathBuf>,
}

async fn bind(
    activated: Option<UnixListener>,
    path: &Path,
    perms: SocketPerms,
) -> Result<Served, RunError> {
    if let Some(listener) = activated {
        tracing::info!(path = %path.display(), "using the systemd-activated socket");
        return Ok(Served {
            listener,
            created: None,
        });
    }
    let listener = serve_unix(path, perms).await?;
    Ok(Served {
        listener,
        created: Some(path.to_owned()),
    })
}

/// Runs the shim with `options` until `shutdown` resolves.
pub async fn run_with(
    config: Config,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let Options {
        admin,
        faults,
        clock,
        on_publisher,
    } = options;
    podward_api::daemon::build_info::register(&admin.registry, "shim", env!("CARGO_PKG_VERSION"));
    let metrics = Metrics::new(&admin.registry)?;
    let publisher = Publisher::new(config.subscriber_queue, metrics.clone(), clock);
    if let Some(f) = on_publisher {
        f(publisher.clone());
    }
    let stop = Stop::new();

    // Sockets first: a second instance must fail before it touches anything.
    let mut activated = activated_listeners()?.into_iter();
    // kubelet and crictl keep the access they had to containerd's socket.
    let perms = SocketPerms::copied_from(&config.containerd_socket).unwrap_or_default();
    let cri = bind(activated.next(), &config.listen, perms).await?;
    let control = bind(
        activated.next(),
        &config.control_socket,
        SocketPerms::default(),
    )
    .await?;
    let admin_listener = podward_api::daemon::admin::bind(config.admin_addr).await?;

    let observer = observe::spawn(publisher.clone(), metrics.clone());
    let upstream = Upstream::new();
    tokio::spawn(upstream.clone().maintain(
        config.containerd_socket.clone(),
        metrics.clone(),
        stop.subscribe(),
    ));
    let (rebuilt_tx, _rebuilt_rx) = watch::channel(0u64);
    tokio::spawn(rebuild::run(
        config.containerd_socket.clone(),
        publisher.clone(),
        upstream.generations(),
        rebuilt_tx,
        stop.subscribe(),
    ));
    tokio::spawn(events::run(
        config.containerd_socket.clone(),
        config.containerd_namespace.clone(),
        publisher.clone(),
        upstream.generations(),
        stop.subscribe(),
    ));
    tokio::spawn(track_readiness(
        admin.readiness.clone(),
        publisher.clone(),
        upstream.generations(),
        upstream.clone(),
        stop.subscribe(),
    ));
    let admin_stop = stop.stopped();
    tokio::spawn(admin.clone().serve(admin_listener, admin_stop));

    let proxy = Proxy::new(upstream, metrics, observer, faults, clock);
    let cri_task = tokio::spawn(proxy.serve(cri.listener, stop.subscribe()));
    let control_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LifecycleApi::service(publisher))
            .serve_with_incoming_shutdown(
                UnixListenerStream::new(control.listener),
                stop.stopped(),
            ),
    );
    tracing::info!(
        listen = %config.listen.display(),
        control = %config.control_socket.display(),
        containerd = %config.containerd_socket.display(),
        "serving"
    );

    shutdown.await;
    tracing::info!("shutting down");
    admin.readiness.set(false);
    stop.trigger();
    let _ = cri_task.await;
    let control_res = control_task.await;
    for path in [cri.created, control.created].into_iter().flatten() {
        // Only sockets we bound ourselves; a systemd-owned socket must outlive us.
        let _ = std::fs::remove_file(&path);
    }
    match control_res {
        Ok(r) => r.map_err(RunError::from),
        Err(_) => Ok(()),
    }
}

/// `/readyz` is true while the CRI socket is served (it is, from before this task starts) and
/// containerd is connected.
async fn track_readiness(
    readiness: podward_api::daemon::admin::Readiness,
    publisher: Publisher,
    mut generations: watch::Receiver<u64>,
    upstream: Upstream,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let connected = upstream.is_connected();
        readiness.set(connected);
        publisher.set_connected(connected);
        // Connection changes are edge-triggered by generations; a drop is noticed by polling.
        tokio::select! {
            _ = stop.changed() => return,
            _ = generations.changed() => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        }
    }
}
