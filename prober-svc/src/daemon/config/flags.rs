//! The daemon's flags, each optional so that only what was given overrides the file.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use podward_api::daemon::telemetry::LogFormat;
use serde::Serialize;

use crate::direct_exec::ExecMode;
use crate::handler::host_policy::HostPolicy;

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
    /// /metrics; they are always on /metrics/probes, where kubelet serves its own. They grow with
    /// every worker: set false when the scraper takes them from /metrics/probes (a value needs the
    /// `=`). [default: true]
    #[arg(long, env = "PODWARD_PROBER_METRICS_WITH_PROBES", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_with_probes: Option<bool>,

    /// Seconds between containerd polls while the shim is unreachable. [default: 2]
    #[arg(long, env = "PODWARD_PROBER_POLL_INTERVAL_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_seconds: Option<u64>,

    /// Which addresses a probe that names a host (httpGet.host, tcpSocket.host) may reach:
    /// "deny-local" refuses loopback, link-local (169.254.169.254), unspecified and cloud
    /// metadata addresses for pods that are not hostNetwork, checked on the resolved address of
    /// every connection and redirect; "deny" refuses every probe that names a host (a spec
    /// error); "allow" is kubelet's behaviour. The body of a probe that names a host is never
    /// shown. [default: deny-local]
    #[arg(long, env = "PODWARD_PROBER_PROBE_HOST_POLICY", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_host_policy: Option<HostPolicy>,

    /// Most Watch subscribers at once (normally 1: the housekeeper or a controller); one more
    /// is refused with RESOURCE_EXHAUSTED. [default: 16]
    #[arg(long, env = "PODWARD_PROBER_MAX_SUBSCRIBERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers: Option<usize>,
    /// This node's name, as the Kubernetes API knows it (spec.nodeName of its pods). Setting it
    /// turns on the Kubernetes API side: the node's pod reflector, the readiness-gate
    /// condition, kubelet's events and preStop hooks before kills. Without the flag, the
    /// NODE_NAME environment variable (the downward API's usual name) is used.
    #[arg(long, env = "PODWARD_PROBER_NODE_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,

    /// kubeconfig file for the Kubernetes API. [default: the pod's service account
    /// (in-cluster configuration)]
    #[arg(long, env = "PODWARD_PROBER_KUBECONFIG")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,

    /// Requests per second to the API server for pods and their status (kubelet's flag of the
    /// same name): readiness-gate writes never exceed it. [default: 50]
    #[arg(long, env = "PODWARD_PROBER_KUBE_API_QPS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_api_qps: Option<f64>,

    /// Requests allowed in a burst above --kube-api-qps. [default: 100]
    #[arg(long, env = "PODWARD_PROBER_KUBE_API_BURST")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_api_burst: Option<u32>,

    /// Kubernetes events per second the prober may create or update (kubelet's --event-qps);
    /// separate from --kube-api-qps so events never delay readiness writes. [default: 50]
    #[arg(long, env = "PODWARD_PROBER_EVENT_QPS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_qps: Option<f64>,

    /// Events allowed in a burst above --event-qps. [default: 100]
    #[arg(long, env = "PODWARD_PROBER_EVENT_BURST")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_burst: Option<u32>,

    /// The pod condition type the prober owns for pods that list it in
    /// spec.readinessGates. [default: podward.io/ready]
    #[arg(long, env = "PODWARD_PROBER_READINESS_GATE_CONDITION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_gate_condition: Option<String>,

    /// Namespace of the node leases (podward's own): the prober renews the Lease named after
    /// its node there while its conditions are current, and the sentinel watches them. Without
    /// the flag, POD_NAMESPACE (the downward API's usual name) is used. [default: podward]
    #[arg(long, env = "PODWARD_PROBER_LEASE_NAMESPACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_namespace: Option<String>,

    /// Seconds between renewals of the node lease (kubelet's node lease: 10). [default: 10]
    #[arg(long, env = "PODWARD_PROBER_NODE_LEASE_RENEW_INTERVAL_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lease_renew_interval_seconds: Option<u64>,

    /// The node lease's duration: how long one renewal vouches for this node's conditions
    /// before the sentinel marks them False (kubelet's --node-lease-duration-seconds).
    /// 0 turns the lease off. [default: 50, the node lifecycle controller's grace period]
    #[arg(long, env = "PODWARD_PROBER_NODE_LEASE_DURATION_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lease_duration_seconds: Option<u64>,

    /// The node lease's last renewal when this prober stops (SIGTERM): its duration, so that a
    /// replacement (a DaemonSet rollout: pod deletion, creation, image pull, first sync) takes
    /// over before the sentinel marks the node. At least the lease's duration, at most 600.
    /// 0: no hand-over (the lease expires at its normal duration). [default: 120]
    #[arg(long, env = "PODWARD_PROBER_NODE_LEASE_HANDOVER_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lease_handover_seconds: Option<u64>,
    /// How exec probes run: "direct" starts the command in the container's namespaces, cgroup,
    /// credentials, capabilities and seccomp filter exactly as runc exec would (about a fifth of
    /// CRI ExecSync's CPU; needs host PID and root with CAP_SYS_ADMIN, see docs/operations.md);
    /// "cri" always uses CRI ExecSync; "auto" is direct where the container allows it and CRI
    /// otherwise (VM runtimes, user namespaces, what direct exec does not reproduce), the choice
    /// per container logged and shown in Status. The default is cri, as the chart's: direct exec
    /// makes the prober a privileged process that enters hostile containers (its hardening:
    /// docs/prober.md, "Direct exec: threat model"). [default: cri]
    #[arg(long, env = "PODWARD_PROBER_EXEC_MODE", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_mode: Option<ExecMode>,

    /// The binary direct exec re-executes as its helper. [default: this binary (/proc/self/exe)]
    #[arg(long, env = "PODWARD_PROBER_EXEC_HELPER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_helper: Option<PathBuf>,

    /// Keep one direct-exec helper started, which forks each probe's helper: a helper's start-up
    /// (exec, loader, runtime) is then paid once, not per probe, at the cost of one idle process
    /// in the prober's own namespaces.
    /// Set false to start each probe's helper from the binary when the probe runs. Started only
    /// once a direct probe ran (a value needs the `=`). [default: true]
    #[arg(long, env = "PODWARD_PROBER_EXEC_STANDBY", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_standby: Option<bool>,

    /// Bytes that all network probes together may hold of what their targets send (heads,
    /// bodies, TLS and HTTP/2 buffers); a probe that finds no room waits up to its timeout, the
    /// pod whose probes hold the most first, then fails naming the budget. 0 sizes it from the
    /// prober's memory limit: a quarter of its cgroup's memory.max (at least 32 MiB), or 256 MiB
    /// without a limit. [default: 0]
    #[arg(long, env = "PODWARD_PROBER_TARGET_MEMORY_BUDGET_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_memory_budget_bytes: Option<u64>,

    /// Log format. [default: text]
    #[arg(long, env = "PODWARD_PROBER_LOG_FORMAT", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,

    /// Log filter in RUST_LOG syntax, e.g. "info,podward_prober=debug". [default: info]
    #[arg(long, env = "PODWARD_PROBER_LOG_LEVEL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}
