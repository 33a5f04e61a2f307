//! The housekeeper's configuration: one typed struct, layered from defaults, a TOML file, the
//! environment (`PODWARD_HOUSEKEEPER_*`) and flags by `podward_api::daemon::config::load`.
//!
//! Every path the housekeeper reads or deletes under is a field here, so tests and the benchmark
//! run the real code on temporary trees. [`check_roots`] refuses roots that cannot be right (`/`,
//! not a directory, no cgroup filesystem, overlapping) before the daemon or `plan --local` reads
//! anything.
//!
//! The housekeeper is in dry run unless told otherwise (`--act`, or `--dry-run=false`): a binary
//! started by hand with a wrong flag must not delete, whatever the chart's default is.

mod roots;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use podward_api::daemon::config::{Common, ConfigError};
use podward_api::daemon::telemetry::LogFormat;
use podward_api::paths;
use serde::{Deserialize, Serialize};

pub use self::roots::RootError;

/// How kubelet names pod cgroups (its `--cgroup-driver`), or `auto` to find out from the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DriverName {
    /// Decide from containerd's CRI RuntimeConfig, else from the pod cgroup root on disk.
    #[default]
    Auto,
    /// `kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
    Systemd,
}

impl DriverName {
    /// What the flag asks of driver detection.
    pub fn flag(self) -> crate::node::cgroup::DriverFlag {
        use crate::node::cgroup::{CgroupDriver, DriverFlag};
        match self {
            Self::Auto => DriverFlag::Auto,
            Self::Cgroupfs => DriverFlag::Set(CgroupDriver::Cgroupfs),
            Self::Systemd => DriverFlag::Set(CgroupDriver::Systemd),
        }
    }
}

/// Everything the housekeeper daemon (and `plan --local`) needs, passed down from `main`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the `podward.housekeeper.v1.Housekeeper` API is served.
    pub socket: PathBuf,
    /// The shim's Lifecycle socket (optional source: undelivered RunPodSandbox results).
    pub shim_socket: PathBuf,
    /// The prober's socket, told to drop workers of pods that are gone (ignored when down).
    pub prober_socket: PathBuf,
    /// Mount point of the cgroup filesystems (v1 controllers below it, or the v2 hierarchy).
    pub cgroup_root: PathBuf,
    /// kubelet's cgroup driver, or `auto` (docs/housekeeper.md: how it is decided).
    pub cgroup_driver: DriverName,
    /// D-Bus address of the bus systemd is on (systemd driver: slices are stopped through it).
    pub systemd_bus: String,
    /// kubelet's `--cgroup-root` (the parent of `kubepods`).
    pub kubelet_cgroup_root: String,
    /// kubelet's `--root-dir`; pod directories are `<kubelet_root>/pods/<uid>`.
    pub kubelet_root: PathBuf,
    /// Pod log directories `<log_root>/<ns>_<name>_<uid>`.
    pub log_root: PathBuf,
    /// The mount table to read (the host's: `/proc/1/mountinfo`).
    pub mountinfo: PathBuf,
    /// Where `/proc` is mounted (process states for D-state reports).
    pub proc_root: PathBuf,
    /// Time between two passes.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long a UID must be absent from the runtime, in every pass, before it is an orphan.
    #[serde(with = "humantime_serde")]
    pub orphan_grace: Duration,
    /// Plan and report, never act. True unless set to false (`--act`, `--dry-run=false`).
    pub dry_run: bool,
    /// Remove exited containers beyond kubelet's GC policy (otherwise only reported).
    pub remove_exited_containers: bool,
    /// Entries one walk of a pod dir may look at before it says "too large to assess this pass".
    pub walk_max_entries: u64,
    /// Time one walk of a pod dir may take before it says "too large to assess this pass".
    #[serde(with = "humantime_serde")]
    pub walk_max_time: Duration,
    /// containerd's CRI socket (read directly, not through the shim), the CRI plugin's namespace
    /// (recorded in logs: CRI itself is namespace-bound), the admin endpoint and logs: the
    /// settings every daemon has.
    #[serde(flatten)]
    pub common: Common,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: paths::HOUSEKEEPER_SOCKET.into(),
            shim_socket: paths::SHIM_SOCKET.into(),
            prober_socket: paths::PROBER_SOCKET.into(),
            cgroup_root: "/sys/fs/cgroup".into(),
            cgroup_driver: DriverName::Auto,
            systemd_bus: crate::node::cgroup::systemd::SYSTEM_BUS.into(),
            kubelet_cgroup_root: "/".into(),
            kubelet_root: "/var/lib/kubelet".into(),
            log_root: "/var/log/pods".into(),
            mountinfo: "/proc/1/mountinfo".into(),
            proc_root: "/proc".into(),
            interval: Duration::from_secs(10),
            orphan_grace: Duration::from_secs(120),
            dry_run: true,
            remove_exited_containers: false,
            walk_max_entries: crate::node::pod_dir::WalkBounds::DEFAULT.max_entries,
            walk_max_time: crate::node::pod_dir::WalkBounds::DEFAULT.max_time,
            common: Common::with_admin_port(9643),
        }
    }
}

fn duration(s: &str) -> Result<String, String> {
    humantime::parse_duration(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{e} (use e.g. \"10s\", \"2m\", \"1h 30m\")"))
}

/// The daemon's flags. Every field is optional so that unset flags leave the config file's
/// value (or the built-in default) in place; see `podward_api::daemon::config::load`.
///
/// The fields' doc comments are the `--help` text, read in a terminal: `<kubelet-root>` there is a
/// placeholder, not an HTML tag.
#[allow(rustdoc::invalid_html_tags)]
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
    /// kubelet's cgroup driver: how pod cgroups are named. `auto` asks containerd (CRI
    /// RuntimeConfig), then looks for kubepods / kubepods.slice on disk; `cgroupfs` or `systemd`
    /// is used only when neither answers, and is an error when it contradicts them. The plan's
    /// header shows the driver and what decided it. [default: auto]
    #[arg(
        long,
        env = "PODWARD_HOUSEKEEPER_CGROUP_DRIVER",
        value_enum,
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<DriverName>,
    /// D-Bus address of the system bus, where systemd is asked to stop an orphan's pod slice
    /// (systemd driver only). [default: unix:path=/run/dbus/system_bus_socket]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_SYSTEMD_BUS", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_bus: Option<String>,
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
    /// Plan and report only; never act. This is the default: the housekeeper deletes nothing
    /// until started with --act (or --dry-run=false; a value needs the `=`). [default: true]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_DRY_RUN", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", global = true)]
    #[serde(skip)]
    pub dry_run: Option<bool>,
    /// Act on the plan: kill and remove orphaned pod cgroups, remove orphaned pod and log
    /// directories and leaked sandboxes. Same as --dry-run=false; conflicts with --dry-run.
    /// Read `podward-housekeeper plan` first. [default: false]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_ACT", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", conflicts_with = "dry_run", global = true)]
    #[serde(skip)]
    pub act: Option<bool>,
    /// Remove exited containers beyond kubelet's GC policy (1 per pod and container name,
    /// newest kept) instead of only reporting them. [default: false]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_REMOVE_EXITED_CONTAINERS", num_args = 0..=1,
          default_missing_value = "true", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove_exited_containers: Option<bool>,
    /// Entries one walk of an orphan's pod dir may look at; past it (or --walk-max-time) the
    /// dir is kept and reported "too large to assess this pass". [default: 100000]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_WALK_MAX_ENTRIES", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walk_max_entries: Option<u64>,
    /// Time one walk of an orphan's pod dir may take, e.g. "2s". [default: 2s]
    #[arg(long, env = "PODWARD_HOUSEKEEPER_WALK_MAX_TIME", value_parser = duration, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walk_max_time: Option<String>,
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

impl Args {
    /// The dry-run setting these flags ask for, if any: `--dry-run[=B]`, or `--act[=B]` (its
    /// opposite). clap refuses both at once, from flags or environment alike.
    pub fn dry_run(&self) -> Option<bool> {
        self.dry_run.or(self.act.map(|act| !act))
    }
}

/// The layer of settings that flags and environment lay over the config file.
#[derive(Serialize)]
struct Overrides<'a> {
    #[serde(flatten)]
    args: &'a Args,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
}

impl Config {
    /// How much one walk of a pod dir may look at.
    pub fn walk_bounds(&self) -> crate::node::pod_dir::WalkBounds {
        crate::node::pod_dir::WalkBounds {
            max_entries: self.walk_max_entries,
            max_time: self.walk_max_time,
        }
    }

    /// Defaults < `--config` file < environment < flags, with `--act` folded into `dry_run`.
    pub fn load(args: &Args) -> Result<Self, ConfigError> {
        let overrides = Overrides {
            args,
            dry_run: args.dry_run(),
        };
        podward_api::daemon::config::load(args.config.as_deref(), &overrides)
    }
}

/// Checks every root the housekeeper removes things under: the kubelet root, the log root and the
/// cgroup root must be directories other than `/`; the cgroup root must hold a cgroup
/// filesystem; the log root and `<kubelet-root>/pods` must not contain one another. A missing
/// `pods/` is not an error here (kubelet may not have made it yet; every pass reports it).
pub fn check_roots(config: &Config) -> Result<(), RootError> {
    roots::check(&config.kubelet_root, &config.log_root, &config.cgroup_root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `text` as the config file, with no flags.
    fn from_file(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("housekeeper.toml");
        std::fs::write(&file, text).expect("write");
        Config::load(&Args {
            config: Some(file),
            ..Args::default()
        })
    }

    #[test]
    fn durations_parse_as_humantime() {
        let c = from_file("interval = \"3s\"\norphan_grace = \"2m 10s\"\n").expect("parse");
        assert_eq!(c.interval, Duration::from_secs(3));
        assert_eq!(c.orphan_grace, Duration::from_secs(130));
        assert_eq!(c.kubelet_root, PathBuf::from("/var/lib/kubelet"));
    }

    #[test]
    fn unknown_keys_are_ignored_and_a_wrong_value_is_refused() {
        let c = from_file("intervall = \"3s\"\n").expect("a key of another release");
        assert_eq!(c.interval, Config::default().interval);
        assert!(from_file("interval = \"soon\"\n").is_err());
    }
}
