//! The kube-rs client: configuration from `--kubeconfig` or the pod's service account
//! (in-cluster), with the process-wide [`TokenBucket`] in front of every request.
//!
//! kube-rs's own retry layer is turned off: the readiness-gate writer retries with its own
//! backoff (and coalesces meanwhile), so every request counts against the limit exactly once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A client for `config` whose requests all take a token of `bucket` first.
pub fn build(config: kube::Config, bucket: Arc<TokenBucket>) -> Result<kube::Client, ClientError> {
    let builder = ClientBuilder::try_from(config).map_err(|e| ClientError::Build(e.to_string()))?;
    Ok(builder.with_layer(&RateLimitLayer::new(bucket)).build())
}
