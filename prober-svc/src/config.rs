//! Flags, environment and config file, layered into one typed [`Config`] (defaults < TOML file <
//! `PODWARD_PROBER_*` environment < flags).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;

use podward_api::daemon::telemetry::LogFormat;
use podward_api::paths;
use serde::{Deserialize, Serialize};

pub use crate::handler::exec::direct::ExecMode;

/// Command-line flags (the daemon's; `cli::Cli` adds the one-shot commands). Every field is
/// optional so that only what was given overrides the file.
#[derive(Debug, Default, Serialize, clap::Parser)]
#[command(
    name = "podward-prober",
    version,
    about = "Runs Kubernetes liveness, readiness and startup probes with kubelet's semantics, \
             outside the kubelet, for pods that carry a podward.io/probes annotation."
)]
pub struct Args {
    /// TOML config file; flags and PODWARD_PROBER_* environment variables override its keys.
    #[arg(long, env = "PODWARD_PROBER_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Unix socket serving the podward.prober.v1.Prober API (Status, Watch, CleanupPods);
    /// `status` dials it. [default: /run/podward/prober.sock]
    #[arg(long, env = "PODWARD_PROBER_SOCKET", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,

    /// The shim's control socket (podward.shim.v1.Lifecycle), the primary source of pods.
    /// [default: /run/podward/shim.sock]
    #[arg(long, env = "PODWARD_PROBER_SHIM_SOCKET")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shim_socket: Option<PathBuf>,

    /// containerd's CRI socket: exec probes (ExecSync), kills (StopContainer) and the fallback
    /// source while the shim is down. [default: /run/containerd/containerd.sock]
    #[arg(long, env = "PODWARD_PROBER_CONTAINERD_SOCKET")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_socket: Option<PathBuf>,

    /// containerd namespace of the CRI plugin. CRI calls carry no namespace (the plugin always
    /// uses its own), so this is only reported in the start-up log. [default: k8s.io]
    #[arg(long, env = "PODWARD_PROBER_CONTAINERD_NAMESPACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_namespace: Option<String>,

    /// Address probed for host-network pods (CRI reports no pod IP for them; kubelet uses the
    /// node's IP). [default: the host's primary IPv4 address: the source address of a route to a
    /// non-routable address (a UDP "connect" that sends nothing), else 127.0.0.1]
    #[arg(long, env = "PODWARD_PROBER_NODE_IP")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_ip: Option<IpAddr>,

    /// Kubernetes version for the probes' User-Agent (kube-probe/<major>.<minor>). [default: 1.33]
    #[arg(long, env = "PODWARD_PROBER_KUBE_VERSION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,

    /// Loopback address of the admin endpoint (/metrics, /metrics/probes, /healthz, /readyz);
    /// port 0 picks one.
    /// [default: 127.0.0.1:9642]
    #[arg(long, env = "PODWARD_PROBER_ADMIN_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<SocketAddr>,

    /// Also serve the probe families (prober_probe_total, prober_probe_duration_seconds) on
    /// /metrics; they are always on /metrics/probes, where kubelet serves its own. They are
    /// ~1.8 KB per worker (55 MB at 30,000 workers): set false when the scraper takes them from
    /// /metrics/probes (a value needs the `=`). [default: true]
    #[arg(long, env = "PODWARD_PROBER_METRICS_WITH_PROBES", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_with_probes: Option<bool>,

    /// Seconds between containerd polls while the shim is unreachable. [default: 2]
    #[arg(long, env = "PODWARD_PROBER_POLL_INTERVAL_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_seconds: Option<u64>,

    /// How exec probes run: "direct" starts the command in the container's namespaces, cgroup,
    /// credentials, capabilities and seccomp filter exactly as runc exec would (about a fifth of
    /// CRI ExecSync's CPU; needs host PID and root with CAP_SYS_ADMIN, see docs/operations.md);
    /// "cri" always uses CRI ExecSync; "auto" is direct where the container allows it and CRI
    /// otherwise (VM runtimes, user namespaces, what direct exec does not reproduce), the choice
    /// per container logged and shown in Status. [default: auto]
    #[arg(long, env = "PODWARD_PROBER_EXEC_MODE", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_mode: Option<ExecMode>,

    /// The binary direct exec re-executes as its helper. [default: this binary (/proc/self/exe)]
    #[arg(long, env = "PODWARD_PROBER_EXEC_HELPER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_helper: Option<PathBuf>,

    /// Log format. [default: text]
    #[arg(long, env = "PODWARD_PROBER_LOG_FORMAT", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,

    /// Log filter in RUST_LOG syntax, e.g. "info,podward_prober=debug". [default: info]
    #[arg(long, env = "PODWARD_PROBER_LOG_LEVEL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}

/// The prober's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Unix socket serving the Prober API.
    pub socket: PathBuf,
    /// The shim's control socket.
    pub shim_socket: PathBuf,
    /// containerd's socket (exec probes, kills, fallback source).
    pub containerd_socket: PathBuf,
    /// containerd namespace of the CRI plugin (reported only: CRI calls carry no namespace).
    pub containerd_namespace: String,
    /// Probe address for host-network pods; `None` = detect at start.
    pub node_ip: Option<IpAddr>,
    /// Kubernetes version in the probes' User-Agent.
    pub kube_version: String,
    /// Admin endpoint address.
    pub admin_addr: SocketAddr,
    /// Whether `/metrics` carries the probe families too (`/metrics/probes` always does).
    pub metrics_with_probes: bool,
    /// Seconds between containerd polls while the shim is down.
    pub poll_interval_seconds: u64,
    /// How exec probes run.
    pub exec_mode: ExecMode,
    /// The direct-exec helper binary; `None` = this binary.
    pub exec_helper: Option<PathBuf>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(paths::PROBER_SOCKET),
            shim_socket: PathBuf::from(paths::SHIM_SOCKET),
            containerd_socket: PathBuf::from(paths::CONTAINERD_SOCKET),
            containerd_namespace: podward_api::labels::CONTAINERD_K8S_NAMESPACE.to_owned(),
            node_ip: None,
            kube_version: "1.33".to_owned(),
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9642)),
            metrics_with_probes: true,
            poll_interval_seconds: 2,
            exec_mode: ExecMode::Auto,
            exec_helper: None,
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
        }
    }
}

impl Config {
    /// The node IP to probe host-network pods at: the configured one, else detected.
    pub fn node_ip(&self) -> IpAddr {
        self.node_ip.unwrap_or_else(detect_node_ip)
    }
}

/// The host's primary IPv4 address: the source address the kernel picks for a route to a
/// non-routable TEST-NET address (a UDP `connect` sends no packet), else loopback.
pub fn detect_node_ip() -> IpAddr {
    let probe = || -> std::io::Result<IpAddr> {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect((Ipv4Addr::new(192, 0, 2, 1), 9))?;
        Ok(s.local_addr()?.ip())
    };
    match probe() {
        Ok(ip) if !ip.is_unspecified() => ip,
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn flags_override_defaults() {
        let args = Args::try_parse_from([
            "podward-prober",
            "--node-ip",
            "127.0.0.1",
            "--kube-version",
            "1.30",
        ])
        .expect("parse");
        let c: Config = podward_api::daemon::config::load(None, &args).expect("load");
        assert_eq!(c.node_ip, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(c.kube_version, "1.30");
        assert_eq!(c.socket, Config::default().socket);
    }

    #[test]
    fn probe_families_stay_on_metrics_unless_turned_off() {
        let load = |argv: &[&str]| -> Result<bool, String> {
            let args =
                Args::try_parse_from(std::iter::once("podward-prober").chain(argv.iter().copied()))
                    .map_err(|e| e.to_string())?;
            podward_api::daemon::config::load::<Config, _>(None, &args)
                .map(|c| c.metrics_with_probes)
                .map_err(|e| e.to_string())
        };
        assert_eq!(load(&[]), Ok(true));
        assert_eq!(load(&["--metrics-with-probes"]), Ok(true));
        assert_eq!(load(&["--metrics-with-probes=false"]), Ok(false));
        // A value needs `=`: `--metrics-with-probes false` is a stray argument, not "false".
        assert!(load(&["--metrics-with-probes", "false"]).is_err());
    }

    #[test]
    fn detected_node_ip_is_usable() {
        assert!(!detect_node_ip().is_unspecified());
    }
}
