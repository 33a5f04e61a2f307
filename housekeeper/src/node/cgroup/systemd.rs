//! The systemd driver's way to remove an orphan's pod slice: over systemd's D-Bus API (zbus and the
//! `org.freedesktop.systemd1.Manager` interface), the way kubelet does it.
//!
//! kubelet's `podContainerManagerImpl.Destroy` kills the pod's processes first, then
//! `cgroupCommon.Destroy` asks libcontainer's systemd manager to destroy the slice: runc's
//! `stopUnit` (`StopUnit(<slice>, "replace")`, wait up to 30 s for the job, then
//! `ResetFailedUnit` so a failed unit does not linger), then the cgroupfs removal of whatever
//! systemd left behind (`UnifiedManager.Destroy` / `LegacyManager.Destroy`: systemd before 240
//! does not remove sub-cgroups, and on v1 kubelet creates some controller directories itself).
//! [`destroy_slice`] does the same, with two differences that an out-of-process agent needs:
//! - it connects to the bus before it kills anything, so a bus it cannot reach fails the action
//!   with nothing changed (rmdir behind systemd's back would leave systemd a unit whose cgroup is
//!   gone);
//! - it asks `GetUnit` first: `StopUnit` on a unit systemd does not have loaded succeeds on a stub
//!   and proves nothing, so only a slice systemd really does not know (`NoSuchUnit`) falls back to
//!   cgroupfs, and the action's evidence says so.
//!
//! [`reduce_slice_cpu`] is kubelet's `ReduceCPULimits` through the same manager: the unit property
//! first (`CPUWeight=1` on v2, `CPUShares=2` on v1, runtime-only, so systemd does not put the old
//! value back on its next reload), then the cgroup file.

mod client;

pub use self::client::{STOP_TIMEOUT, SYSTEM_BUS, StopOutcome, SystemdClient};
use super::cpu::reduce_cpu;
use super::error::CgroupError;
use super::kill::{DestroyReport, kill_processes, remove_dirs};
use super::kinds::CgroupDriver;
use super::layout::{CgroupLayout, CgroupVersion};
use super::name::parse_pod_cgroup_name;
use super::pod_cgroup::PodCgroup;
pub use super::systemd_error::SystemdError;

/// The slice unit of a pod cgroup: the last component of its name, which must be a `.slice` that
/// names this pod (kubelet's `ToSystemd`: the unit name is the cgroup's base name).
pub fn slice_unit(cg: &PodCgroup) -> Result<String, SystemdError> {
    let base = cg.name.rsplit('/').next().unwrap_or_default();
    let parsed = parse_pod_cgroup_name(CgroupDriver::Systemd, base);
    if !base.ends_with(".slice") || parsed.as_deref() != Some(cg.uid.as_str()) {
        return Err(SystemdError::NotASlice(cg.name.clone()));
    }
    Ok(base.to_owned())
}

fn handle() -> Result<tokio::runtime::Handle, SystemdError> {
    tokio::runtime::Handle::try_current().map_err(|_| SystemdError::NoRuntime)
}

/// Destroys a pod slice the systemd driver's way; blocking (call it off the async threads, e.g. in
/// `spawn_blocking`, with a tokio runtime to run the D-Bus calls on).
///
/// 1. connect to systemd (fails with nothing changed if the bus does not answer);
/// 2. kill every process below the slice ([`kill_processes`]);
/// 3. `StopUnit` + wait + `ResetFailedUnit` ([`SystemdClient::stop_unit`]);
/// 4. remove through cgroupfs what is left ([`remove_dirs`]): everything when systemd does
///    not know the unit, else what systemd did not remove itself.
///
/// The report's notes say which path was taken.
pub fn destroy_slice(
    layout: &CgroupLayout,
    cg: &PodCgroup,
    client: &SystemdClient,
) -> Result<DestroyReport, CgroupError> {
    let unit = slice_unit(cg)?;
    let rt = handle()?;
    rt.block_on(client.connect())?;
    let killed = kill_processes(layout, cg)?;
    let outcome = rt.block_on(client.stop_unit(&unit))?;
    let removed = remove_dirs(layout, cg)?;
    let mut notes = Vec::new();
    match outcome {
        StopOutcome::Stopped { result } => {
            notes.push(format!(
                "systemd stopped {unit} (StopUnit job {result}, then ResetFailedUnit)"
            ));
            if !removed.is_empty() {
                notes.push(format!(
                    "{} cgroup directories systemd left behind removed through cgroupfs",
                    removed.len()
                ));
            }
        }
        StopOutcome::UnknownUnit => notes.push(format!(
            "systemd does not know {unit} (NoSuchUnit): removed through cgroupfs instead \
             ({} directories)",
            removed.len()
        )),
    }
    Ok(DestroyReport {
        killed,
        d_state: Vec::new(),
        removed,
        notes,
    })
}

/// kubelet's `ReduceCPULimits` with the systemd driver; blocking like [`destroy_slice`]. Sets the
/// slice's `CPUWeight=1` (v2) or `CPUShares=2` (v1, hybrid) through systemd when it knows the
/// unit, then writes the cgroup files ([`reduce_cpu`]). Without a cpu controller file it
/// still succeeds if systemd took the property.
pub fn reduce_slice_cpu(
    layout: &CgroupLayout,
    cg: &PodCgroup,
    client: &SystemdClient,
) -> Result<(), CgroupError> {
    let unit = slice_unit(cg)?;
    let (name, value) = match layout.version() {
        CgroupVersion::V2 => ("CPUWeight", 1),
        CgroupVersion::V1 | CgroupVersion::Hybrid => ("CPUShares", 2),
    };
    let set = handle()?.block_on(client.set_u64_property(&unit, name, value))?;
    match reduce_cpu(layout, cg) {
        Err(CgroupError::NoCpuController(_)) if set => Ok(()),
        r => r,
    }
}
