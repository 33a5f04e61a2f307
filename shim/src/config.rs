//! The shim's flags and configuration: one typed [`Config`] built from defaults, an optional TOML
//! file, `PODWARD_SHIM_*` environment variables and flags (in that order of precedence).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use podward_api::daemon::config::Common;
use podward_api::daemon::telemetry::LogFormat;
use podward_api::paths;
use serde::{Deserialize, Serialize};

/// Command-line flags. Every field is optional so that unset flags leave the file and defaults.
#[derive(Debug, Default, Clone, clap::Parser, Serialize)]
#[command(
    name = "podward-shim",
    version,
    about = "Transparent CRI relay between kubelet and containerd that publishes the container lifecycle",
    long_about = "Transparent CRI relay between kubelet and containerd.\n\nEvery connection on --listen gets its own connection to --containerd-socket, and the bytes are copied both ways unchanged. \
The HTTP/2 is read beside the copy; the lifecycle calls are decoded to keep an index of sandboxes and \
containers, served as podward.shim.v1.Lifecycle (Snapshot, Watch) on --control-socket.\n\nSettings \
come from (lowest to highest precedence): built-in defaults, the --config TOML file, PODWARD_SHIM_* \
environment variables, flags."
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
    /// containerd's socket, where every connection is relayed.
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
    /// Most Watch subscribers at once (normally 2: the prober and the housekeeper); one more is
    /// refused with RESOURCE_EXHAUSTED. Each holds a snapshot of the node while it reads.
    /// [default: 16]
    #[arg(long, env = "PODWARD_SHIM_MAX_SUBSCRIBERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers: Option<usize>,
    /// Most CRI connections relayed at once, each by a thread of its own (kubelet keeps one or
    /// two; crictl and other tools open one per command). One more is answered UNAVAILABLE and
    /// closed, so its client dials again. [default: 512]
    #[arg(long, env = "PODWARD_SHIM_MAX_CONNECTIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// A client of either socket must send the HTTP/2 connection preface within this, or its
    /// connection is closed (e.g. "10s"). [default: 10s]
    #[arg(long, env = "PODWARD_SHIM_HANDSHAKE_TIMEOUT", value_parser = duration)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake_timeout: Option<String>,
    /// On SIGTERM, how long calls in flight may take to finish before their connections are
    /// closed (new calls already go to the next shim). [default: 1500ms]
    #[arg(long, env = "PODWARD_SHIM_SHUTDOWN_GRACE", value_parser = duration)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<String>,
    /// On SIGTERM, a connection whose calls carry a longer deadline (kubelet's StopContainer
    /// waits out the pod's grace period, RunPodSandbox runs CNI, a long ExecSync) is kept open
    /// until they finish or their deadline passes, but never longer than this; what is still
    /// open then is cut and recorded as undelivered for the next shim. Keep it below the unit's
    /// TimeoutStopSec. [default: 120s]
    #[arg(long, env = "PODWARD_SHIM_MAX_SHUTDOWN_GRACE", value_parser = duration)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_shutdown_grace: Option<String>,
    /// Where the shim leaves, at exit, the calls whose result never reached kubelet (sandboxes
    /// and containers created for a caller that was gone, calls cut at shutdown), for the next
    /// shim to mark them undelivered again after its rebuild. Read and removed at start.
    /// [default: shim-undelivered.json beside the control socket]
    #[arg(long, env = "PODWARD_SHIM_UNDELIVERED_FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undelivered_file: Option<PathBuf>,
    /// While a CRI connection is not observed (its HTTP/2 could not be followed), the index is
    /// relisted from containerd this often (e.g. "1s"); the first relist is immediate.
    /// [default: 1s]
    #[arg(long, env = "PODWARD_SHIM_HEAL_PERIOD", value_parser = duration)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heal_period: Option<String>,
    /// Address of the admin HTTP endpoint (/metrics, /healthz, /readyz); keep it on loopback
    /// (it is unauthenticated). [default: 127.0.0.1:9641]
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
    /// Socket of the Lifecycle control API.
    pub control_socket: PathBuf,
    /// Bounded queue length per Watch subscriber (events).
    pub subscriber_queue: usize,
    /// Most Watch subscribers at once.
    pub max_subscribers: usize,
    /// Most CRI connections relayed at once.
    pub max_connections: usize,
    /// Deadline for a client's HTTP/2 connection preface, on both sockets.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// How long in-flight calls may take to finish on shutdown.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Longest wait on shutdown for calls whose own deadline is longer than `shutdown_grace`.
    #[serde(with = "humantime_serde")]
    pub max_shutdown_grace: Duration,
    /// The calls left undelivered, carried from one shim process to the next; `None`: beside
    /// the control socket ([`Config::undelivered_path`]).
    pub undelivered_file: Option<PathBuf>,
    /// Relist period while a connection is not observed.
    #[serde(with = "humantime_serde")]
    pub heal_period: Duration,
    /// containerd's socket (relay target, rebuild and event source), the namespace whose events
    /// are watched, the admin endpoint and logs: the settings every daemon has.
    #[serde(flatten)]
    pub common: Common,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: PathBuf::from(paths::CRI_SOCKET),
            control_socket: PathBuf::from(paths::SHIM_SOCKET),
            subscriber_queue: 1024,
            max_subscribers: 16,
            max_connections: crate::relay::MAX_CONNECTIONS,
            handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_millis(1500),
            max_shutdown_grace: Duration::from_secs(120),
            undelivered_file: None,
            heal_period: Duration::from_secs(1),
            common: Common::with_admin_port(9641),
        }
    }
}

impl Config {
    /// Loads the configuration: defaults < `args.config` file < environment < flags.
    pub fn load(args: &Args) -> Result<Self, podward_api::daemon::config::ConfigError> {
        let mut c: Self = podward_api::daemon::config::load(args.config.as_deref(), args)?;
        // A zero-length queue would resync on every event; one slot is the useful minimum.
        c.subscriber_queue = c.subscriber_queue.max(1);
        c.max_subscribers = c.max_subscribers.max(1);
        c.max_connections = c.max_connections.max(1);
        // A relist is two List calls to containerd: never in a tight loop.
        c.heal_period = c.heal_period.max(Duration::from_millis(100));
        Ok(c)
    }

    /// Where the undelivered calls are carried to the next shim.
    pub fn undelivered_path(&self) -> PathBuf {
        self.undelivered_file.clone().unwrap_or_else(|| {
            self.control_socket
                .parent()
                .unwrap_or(std::path::Path::new("/run/podward"))
                .join("shim-undelivered.json")
        })
    }

    /// Why the configuration is risky though valid, if it is: said once at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.common.admin_addr.ip().is_loopback() {
            w.push(format!(
                "--admin-addr {} is not a loopback address: /metrics, /healthz and /readyz are \
                 unauthenticated and now reachable from the network",
                self.common.admin_addr
            ));
        }
        w
    }
}

fn duration(s: &str) -> Result<String, String> {
    humantime::parse_duration(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{e} (use e.g. \"10s\", \"1500ms\")"))
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
        assert_eq!(c.common.containerd_namespace, "k8s.io");
        assert_eq!(c.common.admin_addr.to_string(), "127.0.0.1:9641");
        assert_eq!(c.handshake_timeout, Duration::from_secs(10));
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn durations_parse_and_a_non_loopback_admin_address_is_warned_about() {
        let args = Args::parse_from([
            "podward-shim",
            "--handshake-timeout",
            "250ms",
            "--shutdown-grace",
            "2s",
            "--admin-addr",
            "0.0.0.0:9641",
        ]);
        let c = Config::load(&args).expect("load");
        assert_eq!(c.handshake_timeout, Duration::from_millis(250));
        assert_eq!(c.shutdown_grace, Duration::from_secs(2));
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("not a loopback"), "{w:?}");
        let bad = Args::try_parse_from(["podward-shim", "--handshake-timeout", "soon"]);
        assert!(bad.is_err());
    }

    #[test]
    fn a_zero_connection_bound_still_relays_one_and_junk_is_refused() {
        let args = Args::parse_from(["podward-shim", "--max-connections", "0"]);
        assert_eq!(Config::load(&args).expect("load").max_connections, 1);
        assert_eq!(
            Config::load(&Args::parse_from(["podward-shim"]))
                .expect("load")
                .max_connections,
            crate::relay::MAX_CONNECTIONS
        );
        for junk in ["-1", "many", "99999999999999999999999"] {
            let bad = Args::try_parse_from(["podward-shim", "--max-connections", junk]);
            assert!(bad.is_err(), "{junk} accepted");
        }
    }

    #[test]
    fn an_unknown_file_key_is_ignored_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("shim.toml");
        std::fs::write(&f, "listne = \"/tmp/a.sock\"\n").expect("write");
        let args = Args::parse_from(["podward-shim", "--config", f.to_str().expect("utf8")]);
        let c = Config::load(&args).expect("a key of another release does not stop the shim");
        assert_eq!(c.listen, Config::default().listen);
        let w = podward_api::daemon::config::unknown_keys::<Config>(Some(&f));
        assert!(
            w.len() == 1 && w[0].contains("did you mean `listen`"),
            "{w:?}"
        );
    }
}
