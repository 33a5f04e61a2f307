//! From the runtime's view of a container (CRI verbose `ContainerStatus`: the init PID and the
//! OCI runtime spec, parsed with `oci-spec`) and the node's `/proc`, the [`Plan`] of what
//! `runc exec` would do — or the [`Refusal`] saying why this container is left to CRI.
//!
//! What `runc exec` takes from the spec (containerd's `ExecSync` runs the container's own
//! `process` with new `args`): user, groups, env, cwd, capabilities, no_new_privs, rlimits,
//! AppArmor profile, `oomScoreAdj`, seccomp. What it inherits from the runtime shim that starts it:
//! the rest of the rlimits, the umask, and the namespaces the spec does not list — the
//! container's init inherited those same ones, so joining every namespace of the init is
//! exactly right. Anything else that would change the process is refused rather than guessed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, Spec};
use serde_json::Value;

mod cgroups;
mod limits;

use self::cgroups::Unreachable;
use self::limits::{parse_limits, rlimit_number};
use super::init::NAMESPACE_NAMES;
use super::init::{parent_pid, start_time};
use super::plan::{CapSets, NamespaceId, Plan, Rlimit};
use super::seccomp::{self, SeccompError};

/// Runtime types whose shim runs `runc exec` (runc or crun behind containerd's runc shim).
const RUNC_SHIMS: [&str; 2] = ["io.containerd.runc.v2", "io.containerd.runc.v1"];

/// `process` fields `runc exec` applies that the plan reproduces (others are refused).
const PROCESS_FIELDS: [&str; 12] = [
    "terminal",
    "consoleSize",
    "user",
    "args",
    "commandLine",
    "env",
    "cwd",
    "capabilities",
    "rlimits",
    "noNewPrivileges",
    "apparmorProfile",
    "oomScoreAdj",
];

/// `linux` fields that shape the container, not a process joining it (or that joining its
/// namespaces and cgroups reproduces).
const LINUX_FIELDS: [&str; 11] = [
    "namespaces",
    "resources",
    "cgroupsPath",
    "devices",
    "maskedPaths",
    "readonlyPaths",
    "mountLabel",
    "sysctl",
    "rootfsPropagation",
    "seccomp",
    "timeOffsets",
];

/// Why a container's exec probes go through CRI instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The runtime did not say enough (no verbose info, no PID, no spec).
    #[error("the runtime's container status has no {0}")]
    Missing(&'static str),
    /// The spec or info did not parse.
    #[error("unreadable runtime info: {0}")]
    Unreadable(String),
    /// Not runc behind containerd's runc shim (a VM runtime, gVisor, ...).
    #[error("runtime {0:?} is not runc or crun")]
    Runtime(String),
    /// The container has its own user namespace.
    #[error("the container has a user namespace")]
    UserNamespace,
    /// A spec field that would change the process and that direct exec does not reproduce.
    #[error("spec field {0} is not reproduced by direct exec")]
    Field(String),
    /// The seccomp profile cannot be applied exactly.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    /// The container's init is gone or unreadable.
    #[error("the container's init process (pid {pid}) is not readable: {error}")]
    Init {
        /// The PID the runtime reported.
        pid: i32,
        /// What failed.
        error: String,
    },
    /// A cgroup of the container that the prober cannot reach.
    #[error("cgroup {0}")]
    Cgroup(#[from] Unreachable),
    /// The prober lacks a privilege direct exec needs for this container.
    #[error("the prober lacks {0}")]
    Privilege(String),
    /// A probe found that what the plan was made for changed (the helper's words).
    #[error("{0}")]
    Changed(String),
}

/// Where the prober reads the node: `/proc` (a root path, so tests can use a fixture tree).
#[derive(Debug, Clone)]
pub struct Host {
    /// procfs, normally `/proc`.
    pub proc: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
        }
    }
}

fn read(p: &Path) -> Result<String, std::io::Error> {
    std::fs::read_to_string(p)
}

/// The plan for `container_id` from its CRI verbose info (the `info` key's JSON), without argv.
pub fn prepare(container_id: &str, info_json: &str, host: &Host) -> Result<Plan, Refusal> {
    let info: Value =
        serde_json::from_str(info_json).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    check_runtime(&info)?;
    let raw_spec = info
        .get("runtimeSpec")
        .ok_or(Refusal::Missing("runtimeSpec"))?;
    check_fields(raw_spec)?;
    let spec: Spec = serde_json::from_value(raw_spec.clone())
        .map_err(|e| Refusal::Unreadable(format!("runtimeSpec: {e}")))?;
    let pid = info["pid"]
        .as_i64()
        .filter(|p| *p > 0)
        .ok_or(Refusal::Missing("pid"))? as i32;
    let process = spec.process().as_ref().ok_or(Refusal::Missing("process"))?;
    let linux = spec.linux().as_ref().ok_or(Refusal::Missing("linux"))?;
    if linux
        .namespaces()
        .iter()
        .flatten()
        .any(|n| n.typ() == LinuxNamespaceType::User)
    {
        return Err(Refusal::UserNamespace);
    }
    let proc = &host.proc;
    let init_err = |e: std::io::Error| Refusal::Init {
        pid,
        error: e.to_string(),
    };
    let stat = read(&proc.join(format!("{pid}/stat"))).map_err(init_err)?;
    let (Some(init_start_time), Some(shim)) = (start_time(&stat), parent_pid(&stat)) else {
        return Err(Refusal::Unreadable(format!("/proc/{pid}/stat")));
    };
    let theirs = std::fs::metadata(proc.join(format!("{pid}/ns/user"))).map_err(init_err)?;
    let ours = std::fs::metadata(proc.join("self/ns/user")).map_err(init_err)?;
    if (theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino()) {
        return Err(Refusal::UserNamespace);
    }
    let namespaces = namespace_ids(proc, pid).map_err(init_err)?;
    let init_cgroups = read(&proc.join(format!("{pid}/cgroup"))).map_err(init_err)?;
    check_cgroups_name(container_id, &init_cgroups)?;
    let cgroups = cgroups::resolve(
        &init_cgroups,
        &read(&proc.join("self/mountinfo")).map_err(init_err)?,
    )?;
    check_shim_parent(
        shim,
        &read(&proc.join(format!("{shim}/comm"))).map_err(init_err)?,
    )?;
    let (rlimits, umask, oom_score_adj) = from_shim(proc, shim, process)?;
    let caps = cap_sets(process.capabilities().as_ref());
    let seccomp = linux.seccomp().as_ref().map(seccomp::compile).transpose()?;
    let env = normalize_env(process.env().iter().flatten())?;
    let user = process.user();
    let plan = Plan {
        container_id: container_id.to_owned(),
        init_pid: pid,
        init_start_time,
        namespaces,
        cgroups,
        rlimits,
        oom_score_adj,
        umask,
        uid: user.uid(),
        gid: user.gid(),
        groups: user.additional_gids().clone().unwrap_or_default(),
        env,
        cwd: process.cwd().to_string_lossy().into_owned(),
        caps,
        no_new_privileges: process.no_new_privileges().unwrap_or(false),
        apparmor_profile: process.apparmor_profile().clone().filter(|p| !p.is_empty()),
        seccomp,
        argv: Vec::new(),
    };
    check_privileges(&plan, proc)?;
    Ok(plan)
}

/// The identity of every namespace of the init `pid` (a kernel without time namespaces has no
/// `time` file).
fn namespace_ids(proc: &Path, pid: i32) -> Result<Vec<NamespaceId>, std::io::Error> {
    let mut out = Vec::new();
    for name in NAMESPACE_NAMES {
        match std::fs::metadata(proc.join(format!("{pid}/ns/{name}"))) {
            Ok(m) => out.push(NamespaceId {
                name: name.to_owned(),
                dev: m.dev(),
                ino: m.ino(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name == "time" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The process at the runtime's PID is the container's init only if its cgroups are the
/// container's own: both of runc's cgroup drivers name the container's cgroup after its ID
/// (`.../<id>`, `cri-containerd-<id>.scope`). A hierarchy the runtime left the init at the root
/// of (`/`: one it does not manage) says nothing either way; every other one must name the
/// container, and one at least must. A PID that names another process is refused.
fn check_cgroups_name(container_id: &str, cgroup: &str) -> Result<(), Refusal> {
    let paths: Vec<&str> = cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .filter(|p| *p != "/")
        .collect();
    let foreign = paths.iter().find(|p| !p.contains(container_id));
    if paths.is_empty() || foreign.is_some() {
        return Err(Refusal::Changed(format!(
            "the process the runtime named as the container's init is not in the container's \
             cgroup ({})",
            foreign.unwrap_or(&"only root cgroups")
        )));
    }
    Ok(())
}

/// The container's init is a child of containerd's runtime shim (`containerd-shim-runc-v2`,
/// whose command name the kernel cuts to `containerd-shim`): the shim's settings are what
/// `runc exec` inherits, and a PID whose parent is anything else is not the init the runtime
/// started (the PID was reused, or the runtime named another process).
fn check_shim_parent(shim: i32, comm: &str) -> Result<(), Refusal> {
    let comm = comm.trim_end_matches('\n');
    if comm.starts_with("containerd-shim") {
        return Ok(());
    }
    Err(Refusal::Changed(format!(
        "the process the runtime named as the container's init is not a child of \
         containerd's runtime shim (its parent, PID {shim}, is {comm:?})"
    )))
}

/// Only runc (or crun) behind containerd's runc shim is what `runc exec` reproduces.
fn check_runtime(info: &Value) -> Result<(), Refusal> {
    let runtime = info["runtimeType"].as_str().unwrap_or_default();
    if !RUNC_SHIMS.contains(&runtime) {
        return Err(Refusal::Runtime(runtime.to_owned()));
    }
    let binary = info["runtimeOptions"]["binary_name"]
        .as_str()
        .unwrap_or_default();
    let base = Path::new(binary)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if !binary.is_empty() && base != "runc" && base != "crun" {
        return Err(Refusal::Runtime(binary.to_owned()));
    }
    Ok(())
}

/// What `runc exec` inherits from the runtime shim `shim` that starts it, the spec's own values
/// on top: the rlimits, the umask and `oom_score_adj`.
fn from_shim(
    proc: &Path,
    shim: i32,
    process: &oci_spec::runtime::Process,
) -> Result<(Vec<Rlimit>, u32, i32), Refusal> {
    let shim_err = |e: std::io::Error| Refusal::Init {
        pid: shim,
        error: format!("the runtime shim: {e}"),
    };
    let mut rlimits = parse_limits(&read(&proc.join(format!("{shim}/limits"))).map_err(shim_err)?);
    for r in process.rlimits().iter().flatten() {
        let name = serde_json::to_value(r.typ()).unwrap_or_default();
        let Some(resource) = name.as_str().and_then(rlimit_number) else {
            return Err(Refusal::Field(format!("process.rlimits {name}")));
        };
        rlimits.retain(|l| l.resource != resource);
        rlimits.push(Rlimit {
            resource,
            soft: r.soft(),
            hard: r.hard(),
        });
    }
    let shim_status = read(&proc.join(format!("{shim}/status"))).map_err(shim_err)?;
    let umask = shim_status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or(Refusal::Missing("the runtime shim's umask"))?;
    let oom_score_adj = match process.oom_score_adj() {
        Some(v) => v,
        None => read(&proc.join(format!("{shim}/oom_score_adj")))
            .map_err(shim_err)?
            .trim()
            .parse()
            .map_err(|_| Refusal::Missing("the runtime shim's oom_score_adj"))?,
    };
    Ok((rlimits, umask, oom_score_adj))
}

/// Refuses spec fields that would change the exec'd process and are not reproduced.
fn check_fields(spec: &Value) -> Result<(), Refusal> {
    let process = spec.get("process").and_then(Value::as_object);
    for (k, v) in process.into_iter().flatten() {
        if !PROCESS_FIELDS.contains(&k.as_str()) {
            if k == "selinuxLabel" && v.as_str().is_some_and(str::is_empty) {
                continue;
            }
            return Err(Refusal::Field(format!("process.{k}")));
        }
    }
    if spec["process"]["terminal"].as_bool() == Some(true) {
        // Probes never have a terminal; the spec's container does (containerd keeps it for exec).
        return Err(Refusal::Field("process.terminal".into()));
    }
    let user = spec["process"]["user"].as_object();
    for k in user.into_iter().flatten().map(|(k, _)| k) {
        if !["uid", "gid", "additionalGids"].contains(&k.as_str()) {
            return Err(Refusal::Field(format!("process.user.{k}")));
        }
    }
    for (k, _) in spec
        .get("linux")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if !LINUX_FIELDS.contains(&k.as_str()) {
            return Err(Refusal::Field(format!("linux.{k}")));
        }
    }
    Ok(())
}

/// runc's `populateProcessEnvironment`: `os.Setenv` per entry, so a repeated name keeps its
/// first place with its last value; an entry without `=` or with an empty name is an error there.
pub(crate) fn normalize_env<'a>(
    env: impl Iterator<Item = &'a String>,
) -> Result<Vec<String>, Refusal> {
    let mut out: Vec<String> = Vec::new();
    for pair in env {
        let Some((name, _)) = pair.split_once('=') else {
            return Err(Refusal::Field(format!(
                "process.env {pair:?} (not key=value)"
            )));
        };
        if name.is_empty() || pair.contains('\0') {
            return Err(Refusal::Field(format!("process.env {pair:?}")));
        }
        match out
            .iter_mut()
            .find(|e| e.split_once('=').is_some_and(|(n, _)| n == name))
        {
            Some(e) => *e = pair.clone(),
            None => out.push(pair.clone()),
        }
    }
    Ok(out)
}

fn cap_sets(c: Option<&oci_spec::runtime::LinuxCapabilities>) -> CapSets {
    let mask = |set: Option<&oci_spec::runtime::Capabilities>| -> u64 {
        set.into_iter()
            .flatten()
            .filter_map(|c| serde_json::to_value(c).ok())
            .filter_map(|v| v.as_str().and_then(|n| n.parse::<caps::Capability>().ok()))
            .filter(|c| c.index() < 64)
            // Names this kernel lacks are ignored, as runc does ("unknown or unavailable").
            .fold(0, |m, c| m | 1 << c.index())
    };
    let Some(c) = c else {
        return CapSets::default();
    };
    CapSets {
        bounding: mask(c.bounding().as_ref()),
        effective: mask(c.effective().as_ref()),
        permitted: mask(c.permitted().as_ref()),
        inheritable: mask(c.inheritable().as_ref()),
        ambient: mask(c.ambient().as_ref()),
    }
}

/// What the helper will need beyond what the container has: refuse now rather than fail every
/// probe later.
fn check_privileges(plan: &Plan, proc: &Path) -> Result<(), Refusal> {
    let Ok(mine) = caps::read(None, caps::CapSet::Effective) else {
        return Err(Refusal::Privilege("readable capabilities".into()));
    };
    let mask = mine.iter().fold(0u64, |m, c| m | 1 << c.index());
    use caps::Capability as C;
    for c in [
        C::CAP_SYS_ADMIN,
        C::CAP_SYS_CHROOT,
        C::CAP_SETUID,
        C::CAP_SETGID,
        C::CAP_SETPCAP,
    ] {
        if mask & (1 << c.index()) == 0 {
            return Err(Refusal::Privilege(c.to_string()));
        }
    }
    let wanted = plan.caps.bounding | plan.caps.permitted | plan.caps.effective;
    let missing = wanted & !mask;
    if missing != 0 {
        let names: Vec<String> = caps::all()
            .into_iter()
            .filter(|c| missing & (1 << c.index()) != 0)
            .map(|c| c.to_string())
            .collect();
        return Err(Refusal::Privilege(format!(
            "the container's {}",
            names.join(", ")
        )));
    }
    let sys_resource = mask & (1 << C::CAP_SYS_RESOURCE.index()) != 0;
    if !sys_resource {
        let own = parse_limits(&read(&proc.join("self/limits")).unwrap_or_default());
        for r in &plan.rlimits {
            if own
                .iter()
                .any(|o| o.resource == r.resource && o.hard < r.hard)
            {
                return Err(Refusal::Privilege(format!(
                    "CAP_SYS_RESOURCE (rlimit {} has a higher hard limit in the container)",
                    r.resource
                )));
            }
        }
        let own_adj: i32 = read(&proc.join("self/oom_score_adj"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if plan.oom_score_adj < own_adj {
            return Err(Refusal::Privilege(format!(
                "CAP_SYS_RESOURCE (oom_score_adj {} is below the prober's {own_adj})",
                plan.oom_score_adj
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
