//! Which cgroup driver kubelet uses on this node, decided from what the node says instead of
//! assumed. In order:
//! 1. containerd's CRI `RuntimeConfig` (`linux.cgroup_driver`; containerd 1.7+ and 2.x), which is
//!    what kubelet itself follows since 1.28 (kubelet's `getCgroupDriverFromCRI`);
//! 2. the pod cgroup root on disk: `kubepods` is the cgroupfs layout, `kubepods.slice` the
//!    systemd one (under `--kubelet-cgroup-root`, in any hierarchy);
//! 3. the `--cgroup-driver` flag, when neither of the above decides.
//!
//! A flag that contradicts what the node shows is an error naming both, so a chart left at
//! `cgroupfs` on a systemd node fails loudly instead of scanning the wrong tree and reporting
//! "0 items" (docs/housekeeper.md).

use std::path::{Path, PathBuf};

use podward_api::housekeeper::v1::CgroupDriverReport;

use super::error::CgroupError;
use super::kinds::{CgroupDriver, FoundBy, Qos};
use super::layout::{CgroupLayout, CgroupVersion, Hierarchy, find_hierarchies, version_of};

/// What the operator configured (`--cgroup-driver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverFlag {
    /// Decide from the node (the default).
    Auto,
    /// This driver; an error if the node shows the other one.
    Set(CgroupDriver),
}

/// containerd's answer to CRI `RuntimeConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeAnswer {
    /// `linux.cgroup_driver`.
    Driver(CgroupDriver),
    /// An answer without a `linux` section (kubelet then keeps its own flag).
    NoLinuxConfig,
    /// `UNIMPLEMENTED`: containerd before 1.7.
    Unimplemented,
    /// The call failed (containerd down, a timeout, ...): says nothing about the driver.
    Unavailable(String),
}

impl RuntimeAnswer {
    fn describe(&self) -> String {
        match self {
            Self::Driver(d) => {
                format!("containerd's CRI RuntimeConfig reports linux.cgroup_driver={d}")
            }
            Self::NoLinuxConfig => {
                "containerd's CRI RuntimeConfig has no linux section: it does not name the driver"
                    .to_owned()
            }
            Self::Unimplemented => {
                "containerd does not implement CRI RuntimeConfig (before 1.7): it does not name \
                 the driver"
                    .to_owned()
            }
            Self::Unavailable(e) => format!("containerd's CRI RuntimeConfig failed: {e}"),
        }
    }
}

/// The driver decision for one pass, with its reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The driver; `None` when nothing decided (then there is no pod cgroup root to scan).
    pub driver: Option<CgroupDriver>,
    /// What decided it.
    pub found_by: FoundBy,
    /// v1, v2 or hybrid.
    pub version: CgroupVersion,
    /// The observations, in plain words.
    pub evidence: Vec<String>,
    /// The chosen driver's pod cgroup root in every hierarchy where it exists.
    pub pod_roots: Vec<PathBuf>,
}

impl Detection {
    /// The decision as the plan reports it.
    pub fn report(&self) -> CgroupDriverReport {
        CgroupDriverReport {
            driver: self
                .driver
                .map(|d| d.as_str().to_owned())
                .unwrap_or_default(),
            found_by: self.found_by.as_str().to_owned(),
            cgroup_version: self.version.as_str().to_owned(),
            evidence: self.evidence.clone(),
        }
    }
}

/// One driver's pod cgroup root: where it would be, and where it is.
struct Probe {
    /// Relative to a hierarchy root; `None` when `--kubelet-cgroup-root` is not valid for it.
    rel: Option<String>,
    found: Vec<PathBuf>,
}

fn probe(hierarchies: &[Hierarchy], driver: CgroupDriver, cgroup_root: &str) -> Probe {
    let Ok(components) = super::name::parse_cgroup_root(driver, cgroup_root) else {
        return Probe {
            rel: None,
            found: Vec::new(),
        };
    };
    let rel = super::name::qos_dir(driver, &components, Qos::Guaranteed);
    let found = hierarchies
        .iter()
        .map(|h| h.path.join(&rel))
        .filter(|p| p.is_dir())
        .collect();
    Probe {
        rel: Some(rel),
        found,
    }
}

fn seen(paths: &[PathBuf]) -> String {
    match paths {
        [] => "nothing".to_owned(),
        [one] => format!("{} exists", one.display()),
        [first, rest @ ..] => format!(
            "{} exists (and in {} more hierarchies)",
            first.display(),
            rest.len()
        ),
    }
}

/// Decides the driver for the tree under `root` (normally `/sys/fs/cgroup`) and returns the
/// layout to scan with it. Errors: the flag contradicts containerd or the layout
/// ([`CgroupError::DriverMismatch`]); both layouts on disk with nothing else to decide
/// ([`CgroupError::AmbiguousLayout`]); no hierarchy; an invalid `--kubelet-cgroup-root` for the
/// chosen driver.
// One function on purpose: the decision is one table over (containerd's answer, the flag, the
// layouts on disk), and its cases read side by side against docs/housekeeper.md ("Which cgroup
// driver").
pub fn decide_driver(
    root: &Path,
    cgroup_root: &str,
    flag: DriverFlag,
    runtime: &RuntimeAnswer,
) -> Result<(CgroupLayout, Detection), CgroupError> {
    let hierarchies = find_hierarchies(root)?;
    let version = version_of(&hierarchies);
    let fs = probe(&hierarchies, CgroupDriver::Cgroupfs, cgroup_root);
    let sd = probe(&hierarchies, CgroupDriver::Systemd, cgroup_root);
    let probe_of = |d: CgroupDriver| match d {
        CgroupDriver::Cgroupfs => &fs,
        CgroupDriver::Systemd => &sd,
    };
    let layout_says = |d: CgroupDriver| {
        let p = probe_of(d);
        match &p.rel {
            Some(rel) if p.found.is_empty() => format!("no {rel} on disk"),
            Some(_) => seen(&p.found),
            None => format!("--kubelet-cgroup-root {cgroup_root:?} is not valid for it"),
        }
    };
    let mut evidence = vec![runtime.describe()];
    let (driver, found_by) = match (runtime, flag) {
        (RuntimeAnswer::Driver(found), DriverFlag::Set(f)) if f != *found => {
            return Err(CgroupError::DriverMismatch {
                flag: f,
                found: *found,
                found_by: FoundBy::RuntimeConfig,
                evidence: format!("linux.cgroup_driver={found}"),
            });
        }
        (RuntimeAnswer::Driver(d), _) => {
            let other = match d {
                CgroupDriver::Cgroupfs => CgroupDriver::Systemd,
                CgroupDriver::Systemd => CgroupDriver::Cgroupfs,
            };
            evidence.push(format!("{d} layout: {}", layout_says(*d)));
            if !probe_of(other).found.is_empty() {
                evidence.push(format!(
                    "the {other} layout is on disk too ({}): not scanned",
                    seen(&probe_of(other).found)
                ));
            }
            (Some(*d), FoundBy::RuntimeConfig)
        }
        _ => match (fs.found.is_empty(), sd.found.is_empty(), flag) {
            (false, true, _) | (true, false, _) => {
                let on_disk = if fs.found.is_empty() {
                    CgroupDriver::Systemd
                } else {
                    CgroupDriver::Cgroupfs
                };
                if let DriverFlag::Set(f) = flag
                    && f != on_disk
                {
                    return Err(CgroupError::DriverMismatch {
                        flag: f,
                        found: on_disk,
                        found_by: FoundBy::Layout,
                        evidence: format!("{}; {}", layout_says(on_disk), layout_says(f)),
                    });
                }
                evidence.push(format!("{} layout: {}", on_disk, layout_says(on_disk)));
                (Some(on_disk), FoundBy::Layout)
            }
            (false, false, DriverFlag::Set(f)) => {
                evidence.push(format!(
                    "both layouts are on disk ({}; {}): --cgroup-driver={f} decides",
                    seen(&fs.found),
                    seen(&sd.found)
                ));
                (Some(f), FoundBy::Flag)
            }
            (false, false, DriverFlag::Auto) => {
                return Err(CgroupError::AmbiguousLayout {
                    cgroupfs: fs.found[0].clone(),
                    systemd: sd.found[0].clone(),
                });
            }
            (true, true, DriverFlag::Set(f)) => {
                evidence.push(format!(
                    "no pod cgroup root on disk ({}, {}): --cgroup-driver={f} decides",
                    layout_says(CgroupDriver::Cgroupfs),
                    layout_says(CgroupDriver::Systemd)
                ));
                (Some(f), FoundBy::Flag)
            }
            (true, true, DriverFlag::Auto) => {
                evidence.push(format!(
                    "no pod cgroup root on disk ({}, {}) and --cgroup-driver=auto: nothing to scan",
                    layout_says(CgroupDriver::Cgroupfs),
                    layout_says(CgroupDriver::Systemd)
                ));
                (None, FoundBy::Undecided)
            }
        },
    };
    // With nothing decided there is no root of either kind, so naming does not matter for the
    // scan; cgroupfs (kubelet's default) keeps the layout well-formed.
    let naming = driver.unwrap_or(CgroupDriver::Cgroupfs);
    let components = super::name::parse_cgroup_root(naming, cgroup_root)?;
    let pod_roots = probe_of(naming).found.clone();
    let layout = CgroupLayout::with_hierarchies(root, naming, cgroup_root, hierarchies, components);
    Ok((
        layout,
        Detection {
            driver,
            found_by,
            version,
            evidence,
            pod_roots,
        },
    ))
}
