//! The kube-rs client: configuration from `--kubeconfig` or the pod's service account
//! (in-cluster), with the process-wide [`TokenBucket`] in front of every request.
//!
//! kube-rs's own retry layer is not used: the readiness-gate writer retries with its own
//! backoff (and coalesces meanwhile), so every request counts against the limit exactly once.
//!
//! kube-rs speaks HTTP/1.1, where client-go's HTTP/2 connections are checked by pings (a frame
//! read within 30 s, else a ping answered within 15 s, else the connection is closed). Every
//! client here checks its connections in the kernel instead ([`IdleCheck`]): TCP keep-alive
//! probes after 25 s without traffic, and data sent but not acknowledged, both give a peer that
//! vanished without a FIN or a RST (a half-open connection, a blackholed route) at most 40 s;
//! a live peer's kernel answers the probes, so a watch that is merely quiet for minutes stays
//! open. kube-rs's own connector sets neither, so [`build`] makes the connector.
//!
//! Every request of a writing client ([`Deadlines::writes`]: the gate's, the recorder's) has a
//! deadline too, and its connections a read timeout, for a peer that is alive but does not
//! answer; the failed write is then retried on a new connection. The reflector's client keeps
//! no read timeout (a quiet watch is healthy; kube-rs's watcher times its watches out itself)
//! and its own connection pool, so a watch never occupies a writer's connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{BoxError, ServiceBuilder};

use super::limit::{RateLimitLayer, TokenBucket};

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// No kubeconfig was given and the in-cluster configuration is missing or broken.
    #[error("in-cluster configuration (service account): {0}")]
    InCluster(String),
    /// kube-rs refused the configuration (TLS material, URL).
    #[error("Kubernetes client: {0}")]
    Build(String),
}

/// Loads the client configuration: `kubeconfig` when given, else the in-cluster service
/// account (`KUBERNETES_SERVICE_HOST`, the mounted token and CA).
pub async fn load_config(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let err = |e: &dyn std::fmt::Display| ClientError::Kubeconfig {
                path: path.to_owned(),
                message: e.to_string(),
            };
            let kc = Kubeconfig::read_from(path).map_err(|e| err(&e))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(&e))?
        }
        None => kube::Config::incluster().map_err(|e| ClientError::InCluster(e.to_string()))?,
    };
    config.default_retry = false;
    Ok(config)
}

/// A writer's request deadline: the API server's own request timeout (`--request-timeout`, 60 s)
/// and a margin; a live server answers within it (with a `504` at worst).
pub const WRITE_DEADLINE: Duration = Duration::from_secs(70);
/// A writer's connection read timeout: nothing read for this long (the request sent) and the
/// connection is dropped. client-go drops an HTTP/2 connection after 30 s without a frame plus
/// a 15 s ping timeout; a live API server answers within its own 60 s request timeout.
pub const WRITE_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How the kernel finds a connection whose peer went silent: TCP keep-alive probes once nothing
/// has been received for `idle`, one every `interval`; no answer for `idle + interval * probes`
/// since the last segment received closes it. Data sent and not acknowledged for as long closes
/// it too (`TCP_USER_TIMEOUT`; keep-alive probes wait while data is in flight). A live peer's
/// kernel acknowledges both, however quiet its application is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCheck {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Between probes.
    pub interval: Duration,
    /// Unanswered probes that close the connection.
    pub probes: u32,
}

impl IdleCheck {
    /// Every client's: 25 s idle and three probes 5 s apart, a silent peer found within 40 s,
    /// so that with kube-rs's first backoff a watch is resumed within the 45 s client-go's
    /// HTTP/2 connections take to be found dead (30 s without a frame, then 15 s for the
    /// ping's answer: `ReadIdleTimeout`, `PingTimeout`).
    pub const DEFAULT: Self = Self {
        idle: Duration::from_secs(25),
        interval: Duration::from_secs(5),
        probes: 3,
    };

    /// The longest a silent peer holds a connection: `idle + interval * probes`.
    pub fn bound(&self) -> Duration {
        self.idle + self.interval * self.probes
    }
}

/// Deadlines of one client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The whole request, up to the response's head; `None`: none (watches).
    pub request: Option<Duration>,
    /// Nothing read from the connection for this long drops it; `None`: never (watches).
    pub read: Option<Duration>,
    /// How a connection whose peer went silent is found dead.
    pub idle: IdleCheck,
}

impl Deadlines {
    /// The writers' deadlines ([`WRITE_DEADLINE`], [`WRITE_READ_TIMEOUT`]).
    pub fn writes() -> Self {
        Self::within(WRITE_DEADLINE, WRITE_READ_TIMEOUT)
    }

    /// The reflector's: no read timeout (a watch may be quiet for minutes), kube-rs's connect
    /// and write timeouts and the [`IdleCheck`] only.
    pub fn watches() -> Self {
        Self {
            request: None,
            read: None,
            idle: IdleCheck::DEFAULT,
        }
    }

    /// Requests within `request`, connections read within `read`, [`IdleCheck::DEFAULT`].
    pub fn within(request: Duration, read: Duration) -> Self {
        Self {
            request: Some(request),
            read: Some(read),
            idle: IdleCheck::DEFAULT,
        }
    }
}

/// A client for `config` whose requests all take a token of `bucket` first, within
/// `deadlines`.
pub fn build(
    config: kube::Config,
    bucket: Arc<TokenBucket>,
    deadlines: Deadlines,
) -> Result<kube::Client, ClientError> {
    let builder = connections(&config, deadlines)?;
    // The deadline inside the rate limit: a request's time waiting for its token is not
    // counted against it.
    let limit = RateLimitLayer::new(bucket);
    Ok(match deadlines.request {
        Some(d) => builder
            .with_layer(&tower::timeout::TimeoutLayer::new(d))
            .with_layer(&limit)
            .build(),
        None => builder.with_layer(&limit).build(),
    })
}

/// The HTTP service under the rate limit and the deadline.
type Connections =
    tower::util::BoxService<http::Request<Body>, http::Response<hyper::body::Incoming>, BoxError>;

/// kube-rs's stack (base URI, authentication, extra headers over its TLS connector and
/// timeouts) on a TCP connector whose sockets carry `deadlines.idle`.
fn connections(
    config: &kube::Config,
    deadlines: Deadlines,
) -> Result<ClientBuilder<Connections>, ClientError> {
    let err = |e: &dyn std::fmt::Display| ClientError::Build(e.to_string());
    if let Some(proxy) = &config.proxy_url {
        // As kube-rs built without its proxy features: refused rather than bypassed.
        return Err(ClientError::Build(format!(
            "proxy-url {proxy}: proxies are not supported"
        )));
    }
    let idle = deadlines.idle;
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    tcp.set_keepalive(Some(idle.idle));
    tcp.set_keepalive_interval(Some(idle.interval));
    tcp.set_keepalive_retries(Some(idle.probes));
    tcp.set_tcp_user_timeout(Some(idle.bound()));
    let tls = config
        .rustls_https_connector_with_connector(tcp)
        .map_err(|e| err(&e))?;
    let mut timeouts = hyper_timeout::TimeoutConnector::new(tls);
    timeouts.set_read_timeout(deadlines.read);
    timeouts.set_write_timeout(config.write_timeout);
    // The read timeout counts from the request, not from when the pooled connection went
    // idle.
    timeouts.set_reset_reader_on_write(deadlines.read.is_some());
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(timeouts);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| err(&e))?)
        .layer(config.extra_headers_layer().map_err(|e| err(&e))?)
        .map_err(BoxError::from)
        .service(http);
    Ok(ClientBuilder::new(
        tower::util::BoxService::new(service),
        config.default_namespace.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_finds_a_silent_peer_within_client_gos_45_s_with_room_to_resume() {
        let idle = IdleCheck::DEFAULT;
        assert_eq!(
            (idle.idle, idle.interval, idle.probes),
            (Duration::from_secs(25), Duration::from_secs(5), 3)
        );
        assert_eq!(idle.bound(), Duration::from_secs(40));
        for d in [
            Deadlines::watches(),
            Deadlines::writes(),
            Deadlines::within(Duration::from_secs(10), Duration::from_secs(10)),
        ] {
            assert_eq!(d.idle, IdleCheck::DEFAULT, "{d:?}");
        }
        // A quiet watch is healthy: no read timeout, no deadline.
        assert_eq!(
            (Deadlines::watches().request, Deadlines::watches().read),
            (None, None)
        );
    }
}
