//! What the prober hands the exec helper: everything `runc exec` would apply to the process,
//! resolved in the prober (once per container) so the helper only performs system calls.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::seccomp::Program;

/// The hidden first argument that turns `podward-prober` into the exec helper (which reads a
/// [`Plan`] on its stdin).
pub const HELPER_ARG: &str = "__podward-exec-init";

/// One exec, fully resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The container (its session keyring is `_ses.<id>`, as runc names it).
    pub container_id: String,
    /// PID of the container's init, in the prober's PID namespace.
    pub init_pid: i32,
    /// Its start time (`/proc/<pid>/stat` field 22): a reused PID is refused, never entered.
    pub init_start_time: u64,
    /// The identity of each namespace of the container's init when the plan was made: a probe
    /// finds every one unchanged, or is refused.
    pub namespaces: Vec<NamespaceId>,
    /// The container init's cgroups, under the prober's mounts.
    pub cgroups: Cgroups,
    /// Every resource limit: the runtime shim's (which `runc exec` inherits), the spec's on top.
    pub rlimits: Vec<Rlimit>,
    /// `/proc/self/oom_score_adj`: the spec's, else the shim's.
    pub oom_score_adj: i32,
    /// The file-mode creation mask (`runc exec` inherits the shim's).
    pub umask: u32,
    /// `process.user.uid`.
    pub uid: u32,
    /// `process.user.gid`.
    pub gid: u32,
    /// `process.user.additionalGids`.
    pub groups: Vec<u32>,
    /// `process.env`, as runc's `os.Setenv` loop leaves it (a repeated name keeps its first
    /// place and its last value). `HOME` is added by the helper from the container's
    /// `/etc/passwd` when unset, as runc does.
    pub env: Vec<String>,
    /// `process.cwd`.
    pub cwd: String,
    /// Capability sets, one bit per capability number.
    pub caps: CapSets,
    /// `process.noNewPrivileges`.
    pub no_new_privileges: bool,
    /// `process.apparmorProfile`, applied on exec.
    pub apparmor_profile: Option<String>,
    /// `linux.seccomp`, compiled.
    pub seccomp: Option<Program>,
    /// The command.
    pub argv: Vec<String>,
}

/// One namespace of the container's init, as `stat` shows its `/proc/<pid>/ns/<name>` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceId {
    /// The name under `/proc/<pid>/ns/` (`ipc`, `uts`, `net`, `pid`, `mnt`, `cgroup`, `time`).
    pub name: String,
    /// The namespace file system's device.
    pub dev: u64,
    /// The namespace's inode number.
    pub ino: u64,
}

/// The cgroups of the container's init, as the helper places the probe's processes in them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroups {
    /// Each v1 hierarchy's `tasks` file: the helper's intermediate process writes `0` (itself)
    /// to each before it joins the container's namespaces and forks the reaper, which (and the
    /// command) inherit them. The helper itself never joins them.
    pub v1_tasks: Vec<PathBuf>,
    /// The directory on the v2 hierarchy (the `0::` line; on a hybrid node the `unified` one):
    /// the intermediate process forks the reaper straight into it (`clone3` with
    /// `CLONE_INTO_CGROUP`, the directory opened before it joins the container's mount
    /// namespace), or where the kernel cannot, joins it by writing `0` to its `cgroup.procs`.
    pub v2_dir: Option<PathBuf>,
    /// The v1 freezer hierarchy's directory, when the init has one: a frozen (paused) container
    /// is refused, as `runc exec` refuses it.
    #[serde(default)]
    pub v1_freezer: Option<PathBuf>,
}

/// One `setrlimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimit {
    /// `RLIMIT_*` number.
    pub resource: u32,
    /// Soft limit (`RLIM_INFINITY` = `u64::MAX`).
    pub soft: u64,
    /// Hard limit.
    pub hard: u64,
}

/// Capability sets as bit masks (bit n = capability number n).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapSets {
    /// Bounding set.
    pub bounding: u64,
    /// Effective set.
    pub effective: u64,
    /// Permitted set.
    pub permitted: u64,
    /// Inheritable set.
    pub inheritable: u64,
    /// Ambient set.
    pub ambient: u64,
}

/// What the helper sends back on its control socket, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The command could not be started; nothing ran.
    Failed(String),
    /// What the plan was made for no longer holds (the init entered a user namespace of its
    /// own): nothing ran, and this container must not be entered again.
    Refused(String),
    /// The command exited: its code, or 128 + the signal that killed it (as containerd reports).
    Exited(i32),
}

impl Report {
    /// The line for this report.
    pub fn line(&self) -> String {
        match self {
            Report::Failed(m) => format!("failed {}\n", m.replace('\n', " ")),
            Report::Refused(m) => format!("refused {}\n", m.replace('\n', " ")),
            Report::Exited(c) => format!("exited {c}\n"),
        }
    }

    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Option<Report> {
        let (kind, rest) = line.split_once(' ')?;
        match kind {
            "failed" => Some(Report::Failed(rest.to_owned())),
            "refused" => Some(Report::Refused(rest.to_owned())),
            "exited" => rest.parse().ok().map(Report::Exited),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        for r in [
            Report::Refused("the init changed".into()),
            Report::Failed("exec: \"x\": not found".into()),
            Report::Exited(137),
        ] {
            let line = r.line();
            assert_eq!(Report::parse(line.trim_end_matches('\n')), Some(r));
        }
        assert_eq!(Report::parse("nonsense"), None);
    }
}
