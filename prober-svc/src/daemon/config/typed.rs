//! The typed configuration the flags, environment and file are layered into, with its
//! defaults.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::PathBuf;

use podward_api::daemon::config::Common;
use podward_api::paths;
use serde::{Deserialize, Serialize};

use crate::direct_exec::ExecMode;
use crate::handler::host_policy::HostPolicy;
use crate::kubernetes::DEFAULT_GATE_CONDITION;

/// The prober's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Unix socket serving the Prober API.
    pub socket: PathBuf,
    /// The shim's control socket.
    pub shim_socket: PathBuf,
    /// Probe address for host-network pods; `None` = detect at start.
    pub node_ip: Option<IpAddr>,
    /// Kubernetes version in the probes' User-Agent.
    pub kube_version: String,
    /// Whether `/metrics` carries the probe families too (`/metrics/probes` always does).
    pub metrics_with_probes: bool,
    /// Seconds between containerd polls while the shim is down.
    pub poll_interval_seconds: u64,
    /// What a probe that names a host may reach.
    pub probe_host_policy: HostPolicy,
    /// Most Watch subscribers at once.
    pub max_subscribers: usize,
    /// This node's name; `None` leaves the Kubernetes API unused.
    pub node_name: Option<String>,
    /// kubeconfig file; `None`: in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// API requests per second for pods and status.
    pub kube_api_qps: f64,
    /// Burst above `kube_api_qps`.
    pub kube_api_burst: u32,
    /// Event writes per second.
    pub event_qps: f64,
    /// Burst above `event_qps`.
    pub event_burst: u32,
    /// The readiness-gate condition type.
    pub readiness_gate_condition: String,
    /// Namespace of the node leases; `None`: POD_NAMESPACE, else `podward`.
    pub lease_namespace: Option<String>,
    /// Seconds between node lease renewals.
    pub node_lease_renew_interval_seconds: u64,
    /// The node lease's duration in seconds; 0: no lease.
    pub node_lease_duration_seconds: u64,
    /// The node lease's duration at its last renewal on shutdown, in seconds; 0: none.
    pub node_lease_handover_seconds: u64,
    /// How exec probes run.
    pub exec_mode: ExecMode,
    /// The direct-exec helper binary; `None` = this binary.
    pub exec_helper: Option<PathBuf>,
    /// Keep one direct-exec helper started ahead of the next probe.
    pub exec_standby: bool,
    /// The node-wide budget for what probe targets send; 0 = from the memory limit.
    pub target_memory_budget_bytes: u64,
    /// containerd's socket (exec probes, kills, fallback source), the CRI plugin's namespace
    /// (reported only: CRI calls carry no namespace), the admin endpoint and logs: the settings
    /// every daemon has.
    #[serde(flatten)]
    pub common: Common,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(paths::PROBER_SOCKET),
            shim_socket: PathBuf::from(paths::SHIM_SOCKET),
            node_ip: None,
            kube_version: "1.33".to_owned(),
            metrics_with_probes: true,
            poll_interval_seconds: 2,
            probe_host_policy: HostPolicy::DenyLocal,
            max_subscribers: crate::daemon::service::MAX_SUBSCRIBERS,
            node_name: None,
            kubeconfig: None,
            kube_api_qps: 50.0,
            kube_api_burst: 100,
            event_qps: 50.0,
            event_burst: 100,
            readiness_gate_condition: DEFAULT_GATE_CONDITION.to_owned(),
            lease_namespace: None,
            node_lease_renew_interval_seconds: 10,
            node_lease_duration_seconds: 50,
            node_lease_handover_seconds: 120,
            exec_mode: ExecMode::Cri,
            exec_helper: None,
            exec_standby: true,
            target_memory_budget_bytes: 0,
            common: Common::with_admin_port(9642),
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
