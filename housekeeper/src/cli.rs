//! Command line: the daemon's flags (every one also an environment variable and a config-file
//! key) and the `plan` subcommand an operator runs to see what the housekeeper would do.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use podward_api::daemon::telemetry::LogFormat;
use serde::Serialize;

use crate::config::DriverName;

/// podward-housekeeper: finds what kubelet left behind on this node (orphaned pod cgroups, pod
/// and log directories, leaked sandboxes) and removes it safely, with a plan you can inspect.
#[derive(Debug, Parser)]
#[command(name = "podward-housekeeper", version, about, long_about = None)]
pub struct Cli {
    /// Daemon settings (also used by `plan --local`).
    #[command(flatten)]
    pub args: Args,
    /// Run a one-shot command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// One-shot commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the plan: what the next pass would do, and why (asks the running daemon).
    Plan {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Compute one pass in this process instead of asking the daemon. It has no history,
        /// so orphans show as WAITING; it never acts.
        #[arg(long)]
        local: bool,
    },
}

fn duration(s: &str) -> Result<String, String> {
    humantime::parse_duration(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{e} (use e.g. \"10s\", \"2m\", \"1h 30m\")"))
}

/// The daemon's flags. Every field is optional so that unset flags leave the config file's
/// value (or the built-in default) in place; see `podward_api::daemon::config::load`.
#[derive(Debug, Default, clap::Args, Serialize)]
pub struct Args {
    /// TOML config file; keys are the long flag names with `_` for `-`. Flags and environment
    /// variables override it.
    #[arg(long, env = "PODWARD_HOUSEKEEPER_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Socket of the Housekeeper API (Plan, Reconcile, Status); `plan` dials it too.
    /// [default: /run/podward/housekeeper.sock]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_SOCKET", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The shim's Lifecycle socket; optional: without it, leaked sandboxes are not looked for.
    /// [default: /run/podward/shim.sock]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_SHIM_SOCKET", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shim_socket: Option<PathBuf>,
    /// The prober's socket, told to drop workers of pods that are gone; ignored when down.
    /// [default: /run/podward/prober.sock]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_PROBER_SOCKET", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prober_socket: Option<PathBuf>,
    /// containerd's socket, read directly over CRI (ListPodSandbox, ListContainers).
    /// [default: /run/containerd/containerd.sock]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_CONTAINERD_SOCKET", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_socket: Option<PathBuf>,
    /// containerd namespace of the CRI plugin. [default: k8s.io]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_CONTAINERD_NAMESPACE", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_namespace: Option<String>,
    /// Where the cgroup filesystems are mounted. [default: /sys/fs/cgroup]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_CGROUP_ROOT", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<PathBuf>,
    /// kubelet's cgroup driver: how pod cgroups are named. [default: cgroupfs]
    #[arg(
        long,
        env = "PODWARD_HOUSEKEEPER_CGROUP_DRIVER",
        value_enum,
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<DriverName>,
    /// kubelet's --cgroup-root, the parent of `kubepods`. [default: /]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_KUBELET_CGROUP_ROOT", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_cgroup_root: Option<String>,
    /// kubelet's --root-dir; pod directories are <kubelet-root>/pods/<uid>.
    /// [default: /var/lib/kubelet]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_KUBELET_ROOT", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_root: Option<PathBuf>,
    /// Pod log directories, <log-root>/<namespace>_<name>_<uid>. [default: /var/log/pods]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_LOG_ROOT", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_root: Option<PathBuf>,
    /// Mount table to read; must be the host mount namespace's. [default: /proc/1/mountinfo]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_MOUNTINFO", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mountinfo: Option<PathBuf>,
    /// Where /proc is mounted (process states for D-state reports). [default: /proc]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_PROC_ROOT", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_root: Option<PathBuf>,
    /// Time between two passes, e.g. "10s". [default: 10s]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_INTERVAL", value_parser = duration, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// How long a pod UID must be absent from the runtime, in every pass (and in at least two
    /// passes), before anything of it is removed, e.g. "2m". [default: 2m]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_ORPHAN_GRACE", value_parser = duration, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphan_grace: Option<String>,
    /// Plan and report only; never act. [default: false]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_DRY_RUN", num_args = 0..=1,
          default_missing_value = "true", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Remove exited containers beyond kubelet's GC policy (1 per pod and container name,
    /// newest kept) instead of only reporting them. [default: false]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_REMOVE_EXITED_CONTAINERS", num_args = 0..=1,
          default_missing_value = "true", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove_exited_containers: Option<bool>,
    /// Address of /metrics, /healthz and /readyz. [default: 127.0.0.1:9643]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_ADMIN_ADDR", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<SocketAddr>,
    /// Log format. [default: text]
    #[arg(
        long,
        env = "PODWARD_HOUSEKEEPER_LOG_FORMAT",
        value_enum,
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Log filter in RUST_LOG syntax, e.g. "info,podward_housekeeper=debug". [default: info]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_LOG_LEVEL", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::config::Config;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_defaults_and_durations_parse() {
        let cli = Cli::try_parse_from([
            "podward-housekeeper",
            "--interval",
            "3s",
            "--dry-run",
            "--cgroup-driver",
            "systemd",
            "plan",
            "--local",
        ])
        .expect("parse");
        let c: Config = podward_api::daemon::config::load(None, &cli.args).expect("load");
        assert_eq!(c.interval, std::time::Duration::from_secs(3));
        assert!(c.dry_run);
        assert_eq!(c.cgroup_driver, DriverName::Systemd);
        assert!(matches!(
            cli.command,
            Some(Command::Plan {
                local: true,
                json: false
            })
        ));
    }

    #[test]
    fn bad_duration_is_rejected_at_parse_time() {
        assert!(Cli::try_parse_from(["podward-housekeeper", "--orphan-grace", "soon"]).is_err());
    }
}
