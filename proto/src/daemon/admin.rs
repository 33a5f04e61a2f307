//! The loopback admin endpoint: `/metrics` (Prometheus text), `/healthz` (the process is alive and
//! its loops turn) and `/readyz` (it can do its job: e.g. its API socket is served), plus the
//! metrics pages a daemon adds on paths of its own ([`Admin::add_page`]: the prober serves its
//! probe families on `/metrics/probes`, where kubelet serves its own).
//!
//! Plain hyper rather than a web framework: a few fixed GET routes do not justify one.
//!
//! Bounded like the gRPC sockets ([`AdminBounds`]): a client must send its request head within
//! a deadline, a connection lives at most a fixed time, and only so many are served at once (one
//! more is closed at once). The endpoint binds loopback by default; [`bind`] warns when it is
//! not, since it has no authentication.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus::{Encoder, Registry, TextEncoder};
use std::time::Duration;

use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

mod text;

pub use text::{
    CHUNK_BYTES, MetricsText, TextMetrics, write_header, write_label_value, write_labels,
};

/// A response body: fixed text, or the streamed metrics.
type AdminBody = UnsyncBoxBody<Bytes, Infallible>;

/// The admin address could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("admin endpoint {addr}: {source}")]
pub struct BindError {
    /// The address.
    pub addr: std::net::SocketAddr,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Binds the admin endpoint's listener (loopback by default), naming the address on failure;
/// warns when the address is not loopback (the endpoint has no authentication: anyone who can
/// reach it reads the metrics, which name every probed pod).
pub async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, BindError> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr,
            "--admin-addr is not a loopback address: /metrics, /healthz and /readyz are served \
             without authentication to whoever can reach it (pod names and UIDs included); \
             prefer 127.0.0.1 and a node-local scraper, or restrict it with a network policy");
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })
}

/// Per-connection bounds of the admin endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminBounds {
    /// Time a client has to send a request head (HTTP/1) once connected or between requests.
    pub header_timeout: Duration,
    /// Longest a connection is served, whatever it does.
    pub connection_lifetime: Duration,
    /// Connections served at once; one more is closed at once.
    pub max_connections: usize,
    /// HTTP/2 streams per connection.
    pub max_streams: u32,
}

impl Default for AdminBounds {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(60),
            max_connections: 32,
            max_streams: 8,
        }
    }
}

/// A readiness flag with a reason, shared between the daemon's parts and `/readyz`.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    /// A line `/readyz` adds after its verdict: what is degraded though the daemon is ready (or
    /// why it is not).
    detail: Arc<std::sync::RwLock<Option<String>>>,
}

impl Readiness {
    /// Marks the daemon ready (or not).
    pub fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the daemon is ready.
    pub fn get(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Sets (or clears) the detail line `/readyz` adds after its verdict.
    pub fn set_detail(&self, detail: Option<String>) {
        if let Ok(mut d) = self.detail.write() {
            *d = detail;
        }
    }

    /// The detail line, if any.
    pub fn detail(&self) -> Option<String> {
        self.detail.read().ok().and_then(|d| d.clone())
    }

    fn body(&self) -> (bool, String) {
        let ready = self.get();
        let mut body = String::from(if ready { "ready\n" } else { "not ready\n" });
        if let Some(d) = self.detail() {
            body.push_str(&d);
            body.push('\n');
        }
        (ready, body)
    }
}

/// A metrics page on a path of the daemon's own, besides `/metrics`: some of the registry's
/// families, chosen by name, then families the daemon renders itself.
#[derive(Clone, Default)]
pub struct MetricsPage {
    /// Names of the registry's families shown on this page (e.g. `process_start_time_seconds`);
    /// a name the registry does not have is skipped.
    pub families: Vec<String>,
    /// Self-rendered families, after those (see [`TextMetrics`]).
    pub text: Vec<Arc<dyn TextMetrics>>,
}

/// A path [`Admin::add_page`] refused: a programming error of the daemon, reported at start-up.
#[derive(Debug, thiserror::Error)]
#[error("admin endpoint: cannot serve a metrics page on {path:?}: {reason}")]
pub struct PathError {
    /// The path asked for.
    pub path: String,
    /// Why not.
    pub reason: &'static str,
}

/// The paths every daemon serves.
const BUILT_IN_PATHS: [&str; 3] = ["/metrics", "/healthz", "/readyz"];

/// What the admin endpoint serves.
#[derive(Clone)]
pub struct Admin {
    /// Metrics of this process.
    pub registry: Registry,
    /// Flag behind `/readyz`.
    pub readiness: Readiness,
    /// Families the daemon renders itself on `/metrics`, after the registry's (see
    /// [`TextMetrics`]).
    pub text: Vec<Arc<dyn TextMetrics>>,
    /// More metrics pages, by path, in the order added.
    pages: Vec<(String, MetricsPage)>,
    /// Per-connection bounds.
    bounds: AdminBounds,
}

impl Admin {
    /// A fresh registry with the process collector (CPU, RSS, fds) already registered.
    pub fn new() -> Self {
        let registry = Registry::new();
        let pc = prometheus::process_collector::ProcessCollector::for_self();
        if let Err(e) = registry.register(Box::new(pc)) {
            tracing::warn!(error = %e, "cannot register the process collector");
        }
        Self {
            registry,
            readiness: Readiness::default(),
            text: Vec::new(),
            pages: Vec::new(),
            bounds: AdminBounds::default(),
        }
    }

    /// Other per-connection bounds than the defaults (tests shorten them).
    pub fn with_bounds(mut self, bounds: AdminBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Adds a source of self-rendered families to `/metrics`.
    pub fn add_text(&mut self, source: Arc<dyn TextMetrics>) {
        self.text.push(source);
    }

    /// Serves `page` on `path` (absolute, not one of the built-in paths, not added before).
    pub fn add_page(&mut self, path: &str, page: MetricsPage) -> Result<(), PathError> {
        let refuse = |reason| PathError {
            path: path.to_owned(),
            reason,
        };
        if !path.starts_with('/') || path.len() < 2 {
            return Err(refuse("not an absolute path"));
        }
        if BUILT_IN_PATHS.contains(&path) {
            return Err(refuse("every daemon serves that path already"));
        }
        if self.pages.iter().any(|(p, _)| p == path) {
            return Err(refuse("a page is served there already"));
        }
        self.pages.push((path.to_owned(), page));
        Ok(())
    }

    /// The metrics paths served: `/metrics`, then the added pages'.
    pub fn metrics_paths(&self) -> Vec<&str> {
        std::iter::once("/metrics")
            .chain(self.pages.iter().map(|(p, _)| p.as_str()))
            .collect()
    }

    /// Renders `/metrics` as the endpoint serves it: the registry's text (encoded now), then the
    /// self-rendered families, chunk by chunk as the returned [`MetricsText`] is consumed.
    pub fn render_metrics(&self) -> Result<MetricsText, prometheus::Error> {
        let mut head = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut head)?;
        Ok(MetricsText::new(head, self.text.clone()))
    }

    /// Renders the metrics page on `path` as the endpoint serves it (`/metrics` included), or
    /// `None` when no metrics are served there.
    pub fn render_page(&self, path: &str) -> Option<Result<MetricsText, prometheus::Error>> {
        if path == "/metrics" {
            return Some(self.render_metrics());
        }
        let (_, page) = self.pages.iter().find(|(p, _)| p == path)?;
        let families: Vec<_> = self
            .registry
            .gather()
            .into_iter()
            .filter(|f| page.families.iter().any(|n| n == f.name()))
            .collect();
        let mut head = Vec::new();
        Some(
            TextEncoder::new()
                .encode(&families, &mut head)
                .map(|()| MetricsText::new(head, page.text.clone())),
        )
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<AdminBody> {
        let text = |code: StatusCode, body: Bytes| {
            Response::builder()
                .status(code)
                .header("content-type", "text/plain; charset=utf-8")
                .body(Full::new(body).boxed_unsync())
                .unwrap_or_default()
        };
        let fixed = |code, body: &'static str| text(code, Bytes::from_static(body.as_bytes()));
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return fixed(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        match req.uri().path() {
            "/healthz" => fixed(StatusCode::OK, "ok\n"),
            "/readyz" => {
                let (ready, body) = self.readiness.body();
                let code = if ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                text(code, Bytes::from(body))
            }
            path => match self.render_page(path) {
                Some(Ok(body)) => Response::builder()
                    .header("content-type", TextEncoder::new().format_type())
                    .body(body.boxed_unsync())
                    .unwrap_or_default(),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, path, "cannot encode metrics");
                    fixed(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "metrics encoding failed\n",
                    )
                }
                None => {
                    let mut paths = self.metrics_paths();
                    paths.extend(["/healthz", "/readyz"]);
                    text(
                        StatusCode::NOT_FOUND,
                        Bytes::from(format!("try {}\n", paths.join(", "))),
                    )
                }
            },
        }
    }

    /// Serves until `shutdown` resolves. The caller binds `listener` (loopback by default), so
    /// tests can pass port 0.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let bounds = self.bounds;
        let slots = Arc::new(Semaphore::new(bounds.max_connections.max(1)));
        let this = Arc::new(self);
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => return,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin endpoint: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::debug!(%peer, max = bounds.max_connections,
                    "admin endpoint: too many connections; closed");
                continue;
            };
            let this = this.clone();
            tokio::spawn(async move {
                let _slot = slot;
                // hyper's auto builder reads the first bytes (HTTP/1 or HTTP/2?) with no deadline
                // of its own, before `header_read_timeout` applies: a client that sends nothing
                // is closed here.
                let mut first = [0u8; 1];
                match tokio::time::timeout(bounds.header_timeout, stream.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => {
                        tracing::debug!(%peer, "admin endpoint: no request in time; closed");
                        return;
                    }
                }
                let svc = service_fn(move |req| {
                    let resp = this.respond(&req);
                    async move { Ok::<_, Infallible>(resp) }
                });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(bounds.header_timeout);
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(bounds.max_streams);
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                if tokio::time::timeout(bounds.connection_lifetime, conn)
                    .await
                    .is_err()
                {
                    tracing::debug!(%peer, "admin endpoint: connection lifetime reached; closed");
                }
            });
        }
    }
}

impl Default for Admin {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
