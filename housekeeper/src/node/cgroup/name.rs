//! kubelet's cgroup naming for both drivers (pkg/kubelet/cm/cgroup_manager_linux.go,
//! helpers_linux.go): the QoS parents under `<cgroup-root>/kubepods` and `pod<uid>` children.

use super::error::CgroupError;
use super::kinds::{CgroupDriver, Qos};

/// kubelet's `defaultNodeAllocatableCgroupName`.
const KUBEPODS: &str = "kubepods";
/// kubelet's `podCgroupNamePrefix`.
const POD_PREFIX: &str = "pod";

/// Parses `--cgroup-root` into kubelet's internal components. `/` and `` give none. With the
/// systemd driver a slice name (`/foo.slice/foo-bar.slice`) is also accepted and parsed as
/// kubelet's `ParseSystemdToCgroupName` does.
pub(crate) fn parse_cgroup_root(
    driver: CgroupDriver,
    cgroup_root: &str,
) -> Result<Vec<String>, CgroupError> {
    let invalid = |why| CgroupError::InvalidCgroupRoot(cgroup_root.to_owned(), why);
    if !cgroup_root.is_empty() && !cgroup_root.starts_with('/') {
        return Err(invalid("must be absolute"));
    }
    let parts: Vec<&str> = cgroup_root.split('/').filter(|p| !p.is_empty()).collect();
    if parts
        .iter()
        .any(|p| *p == "." || *p == ".." || p.contains('\0'))
    {
        return Err(invalid("must not contain `.`, `..` or NUL"));
    }
    if driver == CgroupDriver::Systemd
        && let Some(last) = parts.last()
        && last.ends_with(".slice")
    {
        return Ok(parse_systemd(last));
    }
    if driver == CgroupDriver::Systemd && parts.iter().any(|p| p.contains('_')) {
        // `_` is systemd naming's escape for `-`; kubelet's NewCgroupName rejects it too.
        return Err(invalid("must not contain `_` with the systemd driver"));
    }
    Ok(parts.into_iter().map(str::to_owned).collect())
}

/// kubelet's `ParseSystemdToCgroupName`: base name, `.slice` trimmed, split on `-`, `_` back to
/// `-`.
fn parse_systemd(name: &str) -> Vec<String> {
    let base = name.rsplit('/').next().unwrap_or(name);
    let base = base.strip_suffix(".slice").unwrap_or(base);
    base.split('-').map(|p| p.replace('_', "-")).collect()
}

/// The internal name (components) of a QoS parent: `[root.., kubepods]`, plus the class for
/// Burstable and BestEffort (Guaranteed pods sit directly under `kubepods`).
fn qos_components(root: &[String], qos: Qos) -> Vec<String> {
    let mut c: Vec<String> = root.to_vec();
    c.push(KUBEPODS.to_owned());
    match qos {
        Qos::Guaranteed => {}
        Qos::Burstable => c.push("burstable".to_owned()),
        Qos::BestEffort => c.push("besteffort".to_owned()),
    }
    c
}

/// kubelet's `ToCgroupfs` / `ToSystemd` (with `ExpandSlice`) of internal components, without the
/// leading `/`.
fn to_driver_path(driver: CgroupDriver, components: &[String]) -> String {
    match driver {
        CgroupDriver::Cgroupfs => components.join("/"),
        CgroupDriver::Systemd => {
            let escaped: Vec<String> = components.iter().map(|c| c.replace('-', "_")).collect();
            (1..=escaped.len())
                .map(|i| format!("{}.slice", escaped[..i].join("-")))
                .collect::<Vec<_>>()
                .join("/")
        }
    }
}

/// The QoS parent directory relative to a hierarchy root, e.g. `kubepods/burstable` or
/// `kubepods.slice/kubepods-burstable.slice`.
pub(crate) fn qos_dir(driver: CgroupDriver, root_components: &[String], qos: Qos) -> String {
    to_driver_path(driver, &qos_components(root_components, qos))
}

/// The pod cgroup name relative to a hierarchy root (kubelet's `GetPodContainerName`).
pub(crate) fn pod_cgroup_name(
    driver: CgroupDriver,
    root_components: &[String],
    qos: Qos,
    uid: &str,
) -> String {
    let mut c = qos_components(root_components, qos);
    c.push(format!("{POD_PREFIX}{uid}"));
    to_driver_path(driver, &c)
}

/// The pod UID of a QoS parent's child entry, or `None` if the entry is not a pod cgroup.
///
/// kubelet's `GetAllPodsFromCgroups`: take the last internal component of the name and split it on
/// `pod`; exactly two parts make `parts[1]` the UID. We require the `pod` prefix like kubelet's
/// `IsPodCgroup` (a `Contains` would take `foopod<x>` for a pod), so `system`, `pod<uid>/x.scope`
/// and a UID containing `pod` are all rejected (kubelet's TestIsCgroupPod), and the UID must be in
/// one of kubelet's shapes (`crate::node::kubelet_names::PodUid`).
pub fn parse_pod_cgroup_name(driver: CgroupDriver, entry: &str) -> Option<String> {
    let base = match driver {
        CgroupDriver::Cgroupfs => entry.to_owned(),
        CgroupDriver::Systemd => parse_systemd(entry).pop()?,
    };
    let uid = base.strip_prefix(POD_PREFIX)?;
    // The UID is joined onto other roots (`<kubelet-root>/pods/<uid>`) and acted on: only kubelet's
    // UID shapes (which hold no `pod`, `/`, `.` or `..`) ever come out of here.
    crate::node::kubelet_names::PodUid::parse(uid)
        .ok()
        .map(String::from)
}
