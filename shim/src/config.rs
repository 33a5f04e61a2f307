//! The shim's flags and configuration: one typed [`Config`] built from defaults, an optional TOML
//! file, `PODWARD_SHIM_*` environment variables and flags (in that order of precedence).

use std::net::SocketAddr;
use std::path::PathBuf;

use podward_api::daemon::telemetry::LogFormat;
use podward_api::paths;
use serde::{Deserialize, Serialize};

/// Command-line flags. Every field is optional so that unset flags leave the file and defaults.
#[derive(Debug, Default, Clone, clap::Parser, Serialize)]
#[command(
    name = "podward-shim",
    version,
    about = "Transparent CRI proxy between kubelet and containerd that publishes the container lifecycle",
    long_about = "Transparent CRI proxy between kubelet and containerd.\n\nEvery gRPC call on --listen is forwarded to --containerd-socket at the HTTP/2 level, unchanged. \
A copy of the lifecycle calls is decoded to keep an index of sandboxes and containers, served as \
podward.shim.v1.Lifecycle (Snapshot, Watch) on --control-socket.\n\nSettings come from (lowest to \
highest precedence): built-in defaults, the --config TOML file, PODWARD_SHIM_* environment \
variables, flags."
)]
pub struct Args {
    /// TOML configuration file (keys as the long flag names with `_` for `-`).
    #[arg(long, env = "PODWARD_SHIM_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// CRI socket to serve (point kubelet's --container-runtime-endpoint here).
    /// [default: /run/podward/cri.sock]
    #[arg(long, env = "PODWARD_SHIM_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<PathBuf>,
    /// containerd's socket, where every call is forwarded.
    /// [default: /run/containerd/containerd.sock]
    #[arg(long, env = "PODWARD_SHIM_CONTAINERD_SOCKET")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_socket: Option<PathBuf>,
    /// Socket of the Lifecycle control API (Snapshot, Watch). [default: /run/podward/shim.sock]
    #[arg(long, env = "PODWARD_SHIM_CONTROL_SOCKET")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_socket: Option<PathBuf>,
    /// containerd namespace whose events are watched (the CRI plugin's). [default: k8s.io]
    #[arg(long, env = "PODWARD_SHIM_CONTAINERD_NAMESPACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_namespace: Option<String>,
    /// Queue length per Watch subscriber, in events; a subscriber whose queue overflows is sent a
    /// fresh snapshot instead of the events it missed. [default: 1024]
    #[arg(long, env = "PODWARD_SHIM_SUBSCRIBER_QUEUE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_queue: Option<usize>,
    /// Address of the admin HTTP endpoint (/metrics, /healthz, /readyz). [default: 127.0.0.1:9641]
    #[arg(long, env = "PODWARD_SHIM_ADMIN_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<SocketAddr>,
    /// Log format. [default: text]
    #[arg(long, env = "PODWARD_SHIM_LOG_FORMAT", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Log filter in RUST_LOG syntax; per-request lines are at debug. [default: info]
    #[arg(long, env = "PODWARD_SHIM_LOG_LEVEL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}

/// The shim's whole configuration, passed down to every part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// CRI socket served to kubelet.
    pub listen: PathBuf,
    /// containerd's socket (forwarding target, rebuild and event source).
    pub containerd_socket: PathBuf,
    /// Socket of the Lifecycle control API.
    pub control_socket: PathBuf,
    /// containerd namespace whose events are watched.
    pub containerd_namespace: String,
    /// Bounded queue length per Watch subscriber (events).
    pub subscriber_queue: usize,
    /// Admin endpoint address.
    pub admin_addr: SocketAddr,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: PathBuf::from(paths::CRI_SOCKET),
            containerd_socket: PathBuf::from(paths::CONTAINERD_SOCKET),
            control_socket: PathBuf::from(paths::SHIM_SOCKET),
            containerd_namespace: podward_api::labels::CONTAINERD_K8S_NAMESPACE.to_owned(),
            subscriber_queue: 1024,
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9641)),
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
        }
    }
}

impl Config {
    /// Loads the configuration: defaults < `args.config` file < environment < flags.
    pub fn load(args: &Args) -> Result<Self, podward_api::daemon::config::ConfigError> {
        let mut c: Self = podward_api::daemon::config::load(args.config.as_deref(), args)?;
        // A zero-length queue would resync on every event; one slot is the useful minimum.
        c.subscriber_queue = c.subscriber_queue.max(1);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn flags_override_file_and_defaults_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("shim.toml");
        std::fs::write(&f, "listen = \"/tmp/a.sock\"\nsubscriber_queue = 7\n").expect("write");
        let args = Args::parse_from([
            "podward-shim",
            "--config",
            f.to_str().expect("utf8"),
            "--subscriber-queue",
            "9",
        ]);
        let c = Config::load(&args).expect("load");
        assert_eq!(c.listen, PathBuf::from("/tmp/a.sock"));
        assert_eq!(c.subscriber_queue, 9);
        assert_eq!(c.containerd_namespace, "k8s.io");
        assert_eq!(c.admin_addr.to_string(), "127.0.0.1:9641");
    }

    #[test]
    fn unknown_file_key_is_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("shim.toml");
        std::fs::write(&f, "listne = \"/tmp/a.sock\"\n").expect("write");
        let args = Args::parse_from(["podward-shim", "--config", f.to_str().expect("utf8")]);
        let err = Config::load(&args).expect_err("must fail");
        assert!(err.to_string().contains("listne"), "{err}");
    }
}
