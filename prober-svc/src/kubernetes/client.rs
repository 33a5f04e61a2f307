//! The kube-rs client: configuration from `--kubeconfig` or the pod's service account
//! (in-cluster), with the process-wide [`TokenBucket`] in front of every request.
//!
//! kube-rs's own retry layer is turned off: the readiness-gate writer retries with its own
//! backoff (and coalesces meanwhile), so every request counts against the limit exactly once.
//!
//! Every request of a writing client ([`Deadlines::writes`]: the gate's, the recorder's) has a
//! deadline, and its connections a read timeout: kube-rs speaks HTTP/1.1, so a read timeout is
//! the health check that client-go's HTTP/2 keep-alive pings are (a peer gone without a FIN, a
//! half-open connection, would otherwise hold a write forever). The failed write is then
//! retried on a new connection. The reflector's client keeps no read timeout (a quiet watch is
//! healthy; kube-rs's watcher times its watches out itself) and its own connection pool, so a
//! watch never occupies a writer's connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

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

/// Deadlines of one client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The whole request, up to the response's head; `None`: none (watches).
    pub request: Option<Duration>,
    /// Nothing read from the connection for this long drops it; `None`: never (watches).
    pub read: Option<Duration>,
}

impl Deadlines {
    /// The writers' deadlines ([`WRITE_DEADLINE`], [`WRITE_READ_TIMEOUT`]).
    pub fn writes() -> Self {
        Self {
            request: Some(WRITE_DEADLINE),
            read: Some(WRITE_READ_TIMEOUT),
        }
    }

    /// The reflector's: no read timeout (a watch may be quiet for minutes), kube-rs's connect
    /// and write timeouts only.
    pub fn watches() -> Self {
        Self {
            request: None,
            read: None,
        }
    }
}

/// A client for `config` whose requests all take a token of `bucket` first, within
/// `deadlines`.
pub fn build(
    mut config: kube::Config,
    bucket: Arc<TokenBucket>,
    deadlines: Deadlines,
) -> Result<kube::Client, ClientError> {
    config.read_timeout = deadlines.read;
    // The read timeout then counts from the request, not from when the pooled connection went
    // idle.
    config.reset_reader_on_write = deadlines.read.is_some();
    let builder = ClientBuilder::try_from(config).map_err(|e| ClientError::Build(e.to_string()))?;
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
