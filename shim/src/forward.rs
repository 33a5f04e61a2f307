//! Frame-level gRPC forwarding: an HTTP/2 server on the CRI socket whose every stream is
//! replayed on one HTTP/2 connection to containerd.
//!
//! Nothing is parsed on the way through: method, path, headers (`grpc-timeout` included), body
//! frames and trailers pass as they are, so any method (known, unknown, future, or containerd's
//! own services) works, unary or streaming. A caller that resets its stream drops the upstream
//! stream too, which cancels it in containerd. When containerd is unreachable the caller gets a
//! trailers-only `UNAVAILABLE`, as a direct connection would give it.

mod body;
mod call;
mod upstream;

use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fault::Faults;
use crate::metrics::Metrics;
use crate::observe::{Observer, Raw, Watched};

pub use body::{RequestBody, ResponseBody, Tap};
pub use call::{grpc_status, grpc_timeout};
pub use upstream::Upstream;

use call::{CallEnd, MethodTable};

/// HTTP/2 stream window: large enough that a multi-MiB ListContainers answer streams without
/// waiting for WINDOW_UPDATEs.
pub(crate) const STREAM_WINDOW: u32 = 8 << 20;
/// HTTP/2 connection window (shared by all streams).
pub(crate) const CONN_WINDOW: u32 = 32 << 20;
/// Largest HTTP/2 frame we accept: fewer frames per large message.
pub(crate) const MAX_FRAME: u32 = 1 << 20;

/// The forwarding service shared by all connections.
pub struct Proxy {
    upstream: Upstream,
    metrics: Metrics,
    methods: MethodTable,
    observer: Observer,
    faults: Faults,
    clock: fn() -> i64,
}

impl Proxy {
    /// A proxy to `upstream`.
    pub fn new(
        upstream: Upstream,
        metrics: Metrics,
        observer: Observer,
        faults: Faults,
        clock: fn() -> i64,
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            methods: MethodTable::new(metrics.clone()),
            metrics,
            observer,
            faults,
            clock,
        })
    }

    /// Accepts connections on `listener` until `shutdown` fires. Each connection is served on
    /// its own task; in-flight calls of open connections end with their connection.
    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            let stream = tokio::select! {
                _ = shutdown.changed() => return,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // EMFILE and friends: keep serving the open connections, retry soon.
                        tracing::warn!(error = %e, "CRI socket: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let this = self.clone();
            let mut conn_shutdown = shutdown.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let this = this.clone();
                    async move { Ok::<_, Infallible>(this.handle(req).await) }
                });
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(CONN_WINDOW)
                    .max_frame_size(MAX_FRAME)
                    .max_header_list_size(1 << 20)
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::pin!(conn);
                tokio::select! {
                    r = conn.as_mut() => if let Err(e) = r {
                        tracing::debug!(error = %e, "CRI connection ended");
                    },
                    _ = conn_shutdown.changed() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
        }
    }

    /// Forwards one call.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<ResponseBody> {
        let started = Instant::now();
        let requested_at_ns = (self.clock)();
        let path = req.uri().path().to_owned();
        let method = self.methods.get(&path);
        method.requests.inc();
        let deadline = grpc_timeout(req.headers()).and_then(|t| started.checked_add(t));
        let watched = Watched::from_path(&path).map(|w| (w, Arc::new(Tap::default())));
        let end = CallEnd {
            method,
            metrics: self.metrics.clone(),
            watched: watched.clone(),
            observer: self.observer.clone(),
            started,
            deadline,
            requested_at_ns,
            clock: self.clock,
        };

        let Some(mut sender) = self.upstream.sender() else {
            end.finish(Some(UNAVAILABLE), true);
            return unavailable("podward-shim: containerd is not reachable");
        };

        let (parts, body) = req.into_parts();
        let on_complete = watched.as_ref().and_then(|(w, _)| {
            w.request_is_news().then(|| {
                let (w, observer) = (*w, self.observer.clone());
                Box::new(move |tap: &Tap| {
                    if let Some(body) = tap.request() {
                        observer.send(Raw::Request {
                            method: w,
                            body,
                            at_ns: requested_at_ns,
                        });
                    }
                }) as body::OnRequestComplete
            })
        });
        let tap = watched.as_ref().map(|(_, t)| t.clone());
        let upstream_req = Request::from_parts(parts, RequestBody::new(body, tap, on_complete));

        // If the caller goes away while we wait for containerd, this future is dropped, which
        // drops the upstream request (cancel) and, through the guard, records the abandonment.
        let mut guard = Pending(Some(end));
        let resp = match sender.send_request(upstream_req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, path, "upstream request failed");
                if let Some(end) = guard.0.take() {
                    end.finish(Some(UNAVAILABLE), true);
                }
                return unavailable("podward-shim: connection to containerd failed");
            }
        };
        let Some(end) = guard.0.take() else {
            return unavailable("podward-shim: internal state lost");
        };
        let (parts, body) = resp.into_parts();
        if let Some(status) = grpc_status(&parts.headers).filter(|_| body_is_empty(&body)) {
            // Trailers-only answer (every gRPC error from containerd): the call is over.
            end.finish(Some(status), true);
            let _ = body;
            return Response::from_parts(parts, ResponseBody::empty());
        }
        let resp = Response::from_parts(parts, ResponseBody::new(body, end));
        // Test hook: hold the response back here. If the caller leaves meanwhile, dropping
        // `resp` reads containerd's answer to the end and records it undelivered.
        self.faults.before_response(&path).await;
        resp
    }
}

/// gRPC `UNAVAILABLE`.
const UNAVAILABLE: i32 = 14;

fn body_is_empty(b: &Incoming) -> bool {
    use http_body::Body;
    b.is_end_stream()
}

/// Records an abandoned call when the handler is dropped before containerd answered.
struct Pending(Option<CallEnd>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(end) = self.0.take() {
            end.abandoned_before_answer();
        }
    }
}

/// A trailers-only gRPC error, as grpc-go sends it.
fn unavailable(message: &'static str) -> Response<ResponseBody> {
    let mut r = Response::new(ResponseBody::empty());
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from_static("14"));
    h.insert("grpc-message", HeaderValue::from_static(message));
    r
}
