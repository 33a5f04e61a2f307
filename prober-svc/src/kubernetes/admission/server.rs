//! The webhook's HTTPS endpoint: `POST /mutate` answers AdmissionReviews, over HTTP/2 or
//! HTTP/1.1 as the API server negotiates, with the serving certificate current at each
//! handshake.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::metrics::AdmissionMetrics;
use super::review;
use super::takeover::{Decision, Policy};

/// The path the MutatingWebhookConfiguration names.
pub const MUTATE_PATH: &str = "/mutate";

/// Largest request body read: an AdmissionReview of a pod CREATE carries one object, which etcd
/// caps at 1.5 MiB; JSON escaping and the review's own fields stay well within this.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Connections served at once; one more is closed at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// Deadline for a TLS handshake and for a request head.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What each request needs.
#[derive(Clone)]
pub struct Webhook {
    /// What the takeover adds.
    pub policy: Arc<Policy>,
    /// Counters.
    pub metrics: AdmissionMetrics,
}

impl Webhook {
    /// Answers one HTTP request.
    pub async fn respond(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.uri().path() != MUTATE_PATH {
            return text(StatusCode::NOT_FOUND, "not found\n");
        }
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
        }
        let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                self.metrics.bad_requests.inc();
                tracing::warn!(error = %e, "AdmissionReview body unreadable or over the limit");
                return text(StatusCode::BAD_REQUEST, "body unreadable or too large\n");
            }
        };
        match review::answer(&body, &self.policy, &self.metrics) {
            Ok(a) => {
                match &a.decision {
                    Decision::TakeOver { moved, .. } => {
                        let containers: Vec<&str> = moved.keys().map(String::as_str).collect();
                        tracing::info!(pod = %a.pod, ?containers,
                            "probes moved to podward.io/probes");
                    }
                    Decision::Skip(reason) => {
                        tracing::debug!(pod = %a.pod, reason = reason.label(),
                            "admitted unchanged");
                    }
                }
                let mut resp = Response::new(Full::new(Bytes::from(a.body.to_string())));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                resp
            }
            Err(e) => {
                self.metrics.bad_requests.inc();
                tracing::warn!(error = %e, "request refused; the API server admits the pod unchanged (failurePolicy Ignore)");
                text(StatusCode::BAD_REQUEST, &format!("{e}\n"))
            }
        }
    }

    /// Serves HTTPS on `listener` with `tls` until `shutdown` resolves.
    pub async fn serve(
        self,
        listener: TcpListener,
        tls: TlsAcceptor,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => return,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, max = MAX_CONNECTIONS, "webhook: too many connections; closed");
                continue;
            };
            let this = self.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "webhook: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "webhook: no TLS handshake in time; closed");
                        return;
                    }
                };
                let svc = service_fn(move |req| {
                    let this = this.clone();
                    async move { Ok::<_, Infallible>(this.respond(req).await) }
                });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HANDSHAKE_TIMEOUT);
                builder.http2().timer(TokioTimer::new());
                if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                    tracing::debug!(%peer, error = %e, "webhook: connection ended with an error");
                }
            });
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_owned())));
    *resp.status_mut() = status;
    resp
}
