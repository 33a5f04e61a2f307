//! Wiring: sockets, the relay, the decoder, the event stream, the rebuild loop, the control API
//! and the admin endpoint, all stopped by one shutdown signal.
//!
//! Shutdown (SIGTERM): readiness drops, the relay stops accepting and winds its connections
//! down (see `relay/connection.rs`: each waits for its calls in flight up to their own deadline,
//! within `--max-shutdown-grace`), Watch streams end with `UNAVAILABLE`, the calls whose result
//! never reached kubelet (those cut included) are left for the next shim (`carry`), and the
//! process exits.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use podward_api::daemon::admin::Admin;
use podward_api::daemon::stop::Stop;
use podward_api::socket::{SocketPerms, activated_listeners, serve_unix};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

use crate::config::Config;
use crate::fault::Faults;
use crate::lifecycle_api::LifecycleApi;
use crate::metrics::Metrics;
use crate::observe::Recorder;
use crate::publish::Publisher;
use crate::relay::Relay;
use crate::runtime::heal::Blindness;
use crate::runtime::upstream::Upstream;
use crate::runtime::{events, heal, rebuild};
use crate::{carry, lifecycle_api, observe};

/// Why the shim could not run: the daemons' shared reasons, or its own.
pub type RunError = podward_api::daemon::run::RunError<StartError>;

/// What the shim itself could not set up.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The decoder thread could not be started.
    #[error("starting the decoder thread: {0}")]
    Decoder(#[source] std::io::Error),
    /// The relay's signal to its connection threads could not be made.
    #[error("making the relay's stop signal: {0}")]
    RelayStop(#[source] std::io::Error),
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
    /// Read buffer per direction of a relayed connection (benchmarks compare sizes).
    pub relay_buffer: usize,
    /// While a large List/Status answer repeats, the same request's answers are read at most
    /// this often (benchmarks measure the read with zero: every answer read).
    pub repeat_read_interval: std::time::Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            admin: Admin::new(),
            faults: Faults::default(),
            clock: podward_api::time::now_ns,
            on_publisher: None,
            relay_buffer: crate::relay::DEFAULT_BUFFER,
            repeat_read_interval: crate::observe::REPEAT_READ_INTERVAL,
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

/// Runs the shim with `options` until `shutdown` resolves, in steps: the sockets (first, so a
/// second instance fails before it touches anything), the decoder, the tasks that keep the index
/// whole and readiness true (`spawn_index_tasks`), the relay and the control API, then the
/// wind-down (`wind_down`).
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
        relay_buffer,
        repeat_read_interval: read_interval,
    } = options;
    crate::memory::tune_allocator();
    podward_api::daemon::build_info::register(&admin.registry, "shim", env!("CARGO_PKG_VERSION"));
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    let metrics = Metrics::new(&admin.registry)?;
    let publisher = Publisher::new(config.subscriber_queue, metrics.clone(), clock);
    if let Some(f) = on_publisher {
        f(publisher.clone());
    }
    let stop = Stop::new();

    // Sockets first: a second instance must fail before it touches anything.
    let (cri, control) = bind_sockets(&config).await?;
    let admin_listener = podward_api::daemon::admin::bind(config.common.admin_addr).await?;

    let undelivered_file = config.undelivered_path();
    carry_in(&publisher, &undelivered_file);
    let (observer, decoder) = observe::spawn(publisher.clone(), metrics.clone())
        .map_err(|e| RunError::Daemon(StartError::Decoder(e)))?;
    spawn_index_tasks(
        &config,
        &publisher,
        &metrics,
        observer.blindness().clone(),
        &admin,
        &stop,
    );
    let admin_stop = stop.stopped();
    tokio::spawn(admin.clone().serve(admin_listener, admin_stop));

    let relay = Arc::new(Relay {
        containerd: config.common.containerd_socket.clone(),
        recorder: Arc::new(
            Recorder::new(metrics.clone(), observer, clock).read_repeats_every(read_interval),
        ),
        faults,
        handshake_timeout: config.handshake_timeout,
        shutdown_grace: config.shutdown_grace,
        max_shutdown_grace: config.max_shutdown_grace,
        buffer: relay_buffer.max(4096),
        max_connections: config.max_connections,
    });
    let serving = relay
        .serve(cri.listener, stop.subscribe())
        .map_err(|e| RunError::Daemon(StartError::RelayStop(e)))?;
    let cri_task = tokio::spawn(serving);
    let publisher_for_exit = publisher.clone();
    let control_task = tokio::spawn(serve_control(
        control.listener,
        config.max_subscribers,
        config.handshake_timeout,
        publisher,
        metrics,
        stop.clone(),
    ));
    tracing::info!(
        listen = %config.listen.display(),
        control = %config.control_socket.display(),
        containerd = %config.common.containerd_socket.display(),
        "serving"
    );

    shutdown.await;
    let grace = config.shutdown_grace.max(config.max_shutdown_grace);
    let control_res = wind_down(&admin, &stop, cri_task, control_task, grace).await;
    carry_out(&publisher_for_exit, decoder, &undelivered_file).await;
    for path in [cri.created, control.created].into_iter().flatten() {
        // Only sockets we bound ourselves; a systemd-owned socket must outlive us.
        let _ = std::fs::remove_file(&path);
    }
    match control_res {
        Ok(r) => r.map_err(RunError::from),
        Err(_) => Ok(()),
    }
}

/// Folds in the calls the previous shim left undelivered at `path` (a file that cannot be used
/// is reported and costs only what it held).
fn carry_in(publisher: &Publisher, path: &Path) {
    match carry::take(path) {
        Ok(calls) if calls.is_empty() => {}
        Ok(calls) => {
            tracing::info!(calls = calls.len(), file = %path.display(),
                "undelivered calls carried from the previous shim");
            publisher.carry_in(calls);
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the previous shim's undelivered calls"),
    }
}

/// At exit, once the relay's connections are closed (what was cut is abandoned) and the decoder
/// has folded their last calls in (it ends when the relay's observers are gone; waited for a
/// bounded time), leaves the undelivered calls at `path` for the next shim.
async fn carry_out(publisher: &Publisher, decoder: std::thread::JoinHandle<()>, path: &Path) {
    let joined = tokio::task::spawn_blocking(move || decoder.join());
    if tokio::time::timeout(Duration::from_secs(2), joined)
        .await
        .is_err()
    {
        tracing::warn!("the decoder did not finish in time; its last calls may not be carried");
    }
    let calls = publisher.with_index(carry::from_index);
    let n = calls.len();
    match carry::save(path, calls) {
        Ok(()) if n > 0 => tracing::info!(calls = n, file = %path.display(),
            "undelivered calls left for the next shim"),
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot leave the undelivered calls for the next shim")
        }
    }
}

/// The CRI socket (systemd's first activated socket, else bound at `listen`) and the control
/// socket (the second, else bound at `control_socket`).
async fn bind_sockets(config: &Config) -> Result<(Served, Served), RunError> {
    let mut activated = activated_listeners()?.into_iter();
    // kubelet and crictl keep the access they had to containerd's socket.
    let perms = SocketPerms::copied_from(&config.common.containerd_socket).unwrap_or_default();
    let cri = bind(activated.next(), &config.listen, perms).await?;
    let control = bind(
        activated.next(),
        &config.control_socket,
        SocketPerms::default(),
    )
    .await?;
    Ok((cri, control))
}

/// Serves the control API (`Lifecycle`: Snapshot, Watch) on `listener` until `stop`.
async fn serve_control(
    listener: UnixListener,
    max_subscribers: usize,
    handshake_timeout: Duration,
    publisher: Publisher,
    metrics: Metrics,
    stop: Stop,
) -> Result<(), tonic::transport::Error> {
    // Keepalive (a subscriber that died without closing its socket is noticed) and stream
    // bounds shared by every podward gRPC socket.
    podward_api::daemon::grpc::server()
        .add_service(LifecycleApi::service(
            publisher,
            max_subscribers,
            stop.clone(),
            metrics.clone(),
        ))
        .serve_with_incoming_shutdown(
            lifecycle_api::incoming(listener, handshake_timeout, metrics, stop.subscribe()),
            stop.stopped(),
        )
        .await
}

/// Starts the tasks that keep the index whole and say whether the shim is ready: healing a
/// blind decoder from relists, the connection to containerd, the index rebuild on each new
/// connection, containerd's events, and `/readyz`.
fn spawn_index_tasks(
    config: &Config,
    publisher: &Publisher,
    metrics: &Metrics,
    blindness: Arc<Blindness>,
    admin: &Admin,
    stop: &Stop,
) {
    tokio::spawn(heal::run(
        config.common.containerd_socket.clone(),
        publisher.clone(),
        blindness,
        config.heal_period,
        admin.readiness.clone(),
        stop.subscribe(),
    ));
    let upstream = Upstream::new();
    tokio::spawn(upstream.clone().maintain(
        config.common.containerd_socket.clone(),
        metrics.clone(),
        stop.subscribe(),
    ));
    let (rebuilt_tx, rebuilt_rx) = watch::channel(0u64);
    tokio::spawn(rebuild::run(
        config.common.containerd_socket.clone(),
        publisher.clone(),
        metrics.clone(),
        upstream.generations(),
        rebuilt_tx,
        stop.subscribe(),
    ));
    tokio::spawn(events::run(
        config.common.containerd_socket.clone(),
        config.common.containerd_namespace.clone(),
        publisher.clone(),
        upstream.generations(),
        stop.subscribe(),
    ));
    tokio::spawn(track_readiness(
        admin.readiness.clone(),
        publisher.clone(),
        upstream.connected_changes(),
        (upstream.generations(), rebuilt_rx),
        stop.subscribe(),
    ));
}

/// Stops everything, readiness first, and waits for the relay's connections and the Watch
/// streams to wind down together, each within `grace`; the control API's result (or its task's
/// failure to join).
async fn wind_down<T>(
    admin: &Admin,
    stop: &Stop,
    cri_task: JoinHandle<()>,
    control_task: JoinHandle<Result<(), T>>,
    grace: Duration,
) -> Result<Result<(), T>, JoinError> {
    let stopping = tokio::time::Instant::now();
    tracing::info!("shutting down");
    admin.readiness.set(false);
    stop.trigger();
    // A subscriber too stuck to read even its final status must not hold the process.
    let control_bound = grace + Duration::from_millis(250);
    let (_, control_res) = tokio::join!(cri_task, async {
        tokio::time::timeout(control_bound, control_task)
            .await
            .unwrap_or(Ok(Ok(())))
    });
    tracing::info!(
        ms = u64::try_from(stopping.elapsed().as_millis()).unwrap_or(u64::MAX),
        "stopped"
    );
    control_res
}

/// `/readyz` is true while the CRI socket is served (it is, from before this task starts),
/// containerd is connected and the index has been rebuilt on this connection: a shim that cannot
/// build its index (containerd answering, the rebuild failing) is not ready, whatever it relays.
/// `publisher.set_connected` follows the connection alone. Edge-triggered: nothing wakes while
/// idle.
async fn track_readiness(
    readiness: podward_api::daemon::admin::Readiness,
    publisher: Publisher,
    mut connected: watch::Receiver<bool>,
    (mut generation, mut rebuilt): (watch::Receiver<u64>, watch::Receiver<u64>),
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let up = *connected.borrow_and_update();
        let current = *generation.borrow_and_update();
        let whole = current > 0 && *rebuilt.borrow_and_update() == current;
        readiness.set(up && whole);
        publisher.set_connected(up);
        tokio::select! {
            _ = stop.changed() => return,
            r = connected.changed() => if r.is_err() { return },
            r = generation.changed() => if r.is_err() { return },
            r = rebuilt.changed() => if r.is_err() { return },
        }
    }
}
