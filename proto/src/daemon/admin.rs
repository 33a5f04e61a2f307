//! The loopback admin endpoint: `/metrics` (Prometheus text), `/healthz` (the process is alive and
//! its loops turn) and `/readyz` (it can do its job: e.g. its API socket is served).
//!
//! Plain hyper rather than a web framework: three fixed GET routes do not justify one.

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
use tokio::net::TcpListener;

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

/// Binds the admin endpoint's listener (loopback by default), naming the address on failure.
pub async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })
}

/// A readiness flag with a reason, shared between the daemon's parts and `/readyz`.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
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
}

/// What the admin endpoint serves.
#[derive(Clone)]
pub struct Admin {
    /// Metrics of this process.
    pub registry: Registry,
    /// Flag behind `/readyz`.
    pub readiness: Readiness,
    /// Families the daemon renders itself, after the registry's (see [`TextMetrics`]).
    pub text: Vec<Arc<dyn TextMetrics>>,
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
        }
    }

    /// Adds a source of self-rendered families to `/metrics`.
    pub fn add_text(&mut self, source: Arc<dyn TextMetrics>) {
        self.text.push(source);
    }

    /// Renders `/metrics` as the endpoint serves it: the registry's text (encoded now), then the
    /// self-rendered families, chunk by chunk as the returned [`MetricsText`] is consumed.
    pub fn render_metrics(&self) -> Result<MetricsText, prometheus::Error> {
        let mut head = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut head)?;
        Ok(MetricsText::new(head, self.text.clone()))
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<AdminBody> {
        let text = |code: StatusCode, body: &'static str| {
            Response::builder()
                .status(code)
                .header("content-type", "text/plain; charset=utf-8")
                .body(Full::new(Bytes::from_static(body.as_bytes())).boxed_unsync())
                .unwrap_or_default()
        };
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        match req.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" if self.readiness.get() => text(StatusCode::OK, "ready\n"),
            "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
            "/metrics" => match self.render_metrics() {
                Ok(body) => Response::builder()
                    .header("content-type", TextEncoder::new().format_type())
                    .body(body.boxed_unsync())
                    .unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot encode metrics");
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "metrics encoding failed\n",
                    )
                }
            },
            _ => text(StatusCode::NOT_FOUND, "try /metrics, /healthz or /readyz\n"),
        }
    }

    /// Serves until `shutdown` resolves. The caller binds `listener` (loopback by default), so
    /// tests can pass port 0.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let this = Arc::new(self);
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                _ = &mut shutdown => return,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin endpoint: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let this = this.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let resp = this.respond(&req);
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    }
}

impl Default for Admin {
    fn default() -> Self {
        Self::new()
    }
}
