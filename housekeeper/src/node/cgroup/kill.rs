//! Destroying an orphan's pod cgroup: stop it from forking, kill every process in it and in every
//! descendant in every hierarchy, wait (bounded) for them to leave, then rmdir the tree bottom-up.
//!
//! The two halves are public on their own ([`kill_processes`], [`remove_dirs`]) because the
//! systemd driver puts `StopUnit` between them (see `systemd.rs`).

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::child_dirs::child_dirs;
use super::cpu::write_existing;
use super::error::CgroupError;
use super::layout::{CgroupLayout, Hierarchy, HierarchyKind};
use super::pod_cgroup::PodCgroup;

/// What `destroy` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestroyReport {
    /// Pids sent SIGKILL (or already gone when signalled).
    pub killed: Vec<i32>,
    /// Pids found in uninterruptible sleep; always empty in a successful report (they make
    /// `destroy` fail with [`CgroupError::Busy`], which carries them).
    pub d_state: Vec<i32>,
    /// Cgroup directories removed through cgroupfs, children before parents.
    pub removed: Vec<PathBuf>,
    /// How it was removed, in plain words, when that is worth telling an operator (the systemd
    /// driver's path); appended to the action's evidence.
    pub notes: Vec<String>,
}

/// How long to wait for a v1 freezer to reach FROZEN; a task in D state can hold it in FREEZING,
/// and killing without the freeze is still correct, only racier against forks.
const FREEZE_WAIT: Duration = Duration::from_millis(500);
/// runc's `rmdir` retry on EBUSY: 1 ms, doubling, 10 tries.
const RMDIR_TRIES: u32 = 10;
/// Upper bound of the poll interval while waiting for processes to go.
const MAX_POLL: Duration = Duration::from_millis(50);

/// One hierarchy's copy of the pod cgroup and its descendants.
struct Tree<'a> {
    hierarchy: &'a Hierarchy,
    pod: &'a Path,
    /// Descendants, deepest first, the pod cgroup itself last.
    dirs: Vec<PathBuf>,
}

/// Kills every process of the pod cgroup (all descendants, all hierarchies) and removes the cgroup
/// directories bottom-up: [`kill_processes`], then [`remove_dirs`]. This is the cgroupfs driver's
/// destroy (kubelet's `podContainerManagerImpl.Destroy` with runc's fs managers).
pub fn destroy(layout: &CgroupLayout, cg: &PodCgroup) -> Result<DestroyReport, CgroupError> {
    let killed = kill_processes(layout, cg)?;
    let removed = remove_dirs(layout, cg)?;
    Ok(DestroyReport {
        killed,
        d_state: Vec::new(),
        removed,
        notes: Vec::new(),
    })
}

/// Kills every process of the pod cgroup (all descendants, all hierarchies) and waits until none
/// is left; returns the pids signalled. Removes nothing.
///
/// v2: writes `1` to `cgroup.kill` when the file exists (else freezes with `cgroup.freeze`); v1:
/// freezes through the freezer hierarchy, SIGKILLs each pid listed in `cgroup.procs` anywhere in
/// the tree, then thaws so the signals are delivered. It waits up to `layout.kill_wait` until every
/// `cgroup.procs` is empty and, on v2, the pod cgroup's `cgroup.events` says `populated 0` (the
/// kernel's own word that no live task is left below it). Survivors make it fail with
/// [`CgroupError::Busy`], listing the ones in D state, without retrying in a loop (the caller
/// backs off). Only `cgroup.kill`, `cgroup.freeze` and `freezer.state` are written: pressure
/// files and `memory.events` are never touched.
pub fn kill_processes(layout: &CgroupLayout, cg: &PodCgroup) -> Result<Vec<i32>, CgroupError> {
    let trees = collect_trees(layout, cg)?;
    // Listed before `cgroup.kill` empties the lists, so the report names what was killed; only
    // pids listed again after the freeze are signalled (a pid read earlier may have been reused).
    let mut killed = listed_pids(&trees)?;
    let frozen = freeze(&trees)?;
    let signalled = kill_listed(&trees, &mut killed);
    thaw(&frozen)?;
    signalled?;

    let deadline = Instant::now() + layout.kill_wait;
    let mut delay = Duration::from_millis(1);
    loop {
        let remaining = listed_pids(&trees)?;
        if remaining.is_empty() && !v2_populated(&trees)? {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            let d_state = remaining
                .iter()
                .copied()
                .filter(|pid| {
                    crate::node::procs::process_state(&layout.proc_root, *pid) == Some('D')
                })
                .collect();
            return Err(CgroupError::Busy {
                name: cg.name.clone(),
                killed: killed.into_iter().collect(),
                d_state,
                remaining: remaining.into_iter().collect(),
            });
        }
        // A process forked between listing and the kill (no freezer) is caught here.
        for pid in &remaining {
            if killed.insert(*pid) {
                signal(*pid)?;
            }
        }
        std::thread::sleep(delay.min(deadline - now));
        delay = (delay * 2).min(MAX_POLL);
    }
    Ok(killed.into_iter().collect())
}

/// Removes the pod cgroup's directories in every hierarchy, children first, with runc's EBUSY
/// retry; a directory already gone counts as done. Returns what it removed. Call it after
/// [`kill_processes`]: a cgroup with tasks cannot be removed.
pub fn remove_dirs(layout: &CgroupLayout, cg: &PodCgroup) -> Result<Vec<PathBuf>, CgroupError> {
    let mut removed = Vec::new();
    for tree in &collect_trees(layout, cg)? {
        for dir in &tree.dirs {
            if rmdir_retry(dir)? {
                removed.push(dir.clone());
            }
        }
    }
    Ok(removed)
}

/// Whether any v2 pod cgroup still reports `populated 1` in its `cgroup.events` (which covers
/// every descendant). A missing file (the cgroup is gone, or a fake tree without it) says nothing
/// is left.
fn v2_populated(trees: &[Tree<'_>]) -> Result<bool, CgroupError> {
    for tree in trees
        .iter()
        .filter(|t| t.hierarchy.kind == HierarchyKind::V2)
    {
        let file = tree.pod.join("cgroup.events");
        match std::fs::read_to_string(&file) {
            Ok(s) => {
                if s.lines().any(|l| l.trim() == "populated 1") {
                    return Ok(true);
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(CgroupError::io("read", file, e)),
        }
    }
    Ok(false)
}

/// Checks every path belongs to this pod under the layout and lists its descendants.
fn collect_trees<'a>(
    layout: &'a CgroupLayout,
    cg: &'a PodCgroup,
) -> Result<Vec<Tree<'a>>, CgroupError> {
    let mut trees = Vec::new();
    for pod in &cg.paths {
        let hierarchy = layout.pod_hierarchy(pod, &cg.uid)?;
        trees.push(Tree {
            hierarchy,
            pod,
            dirs: descendants(pod)?,
        });
    }
    Ok(trees)
}

/// `root` and all directories below it, deepest first (`root` last). Empty if `root` is gone.
fn descendants(root: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let mut preorder = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Some(children) = child_dirs(&dir)? else {
            continue;
        };
        stack.extend(children.iter().map(|c| c.path()));
        preorder.push(dir);
    }
    // Pre-order puts every parent before its children; reversed, children come first.
    preorder.reverse();
    Ok(preorder)
}

/// Freezes each tree that has a freezer, returning what to thaw (file, thaw value).
fn freeze(trees: &[Tree<'_>]) -> Result<Vec<(PathBuf, &'static str)>, CgroupError> {
    let mut frozen = Vec::new();
    for tree in trees.iter().filter(|t| !t.dirs.is_empty()) {
        match &tree.hierarchy.kind {
            HierarchyKind::V2 => {
                if write_existing(&tree.pod.join("cgroup.kill"), "1")? {
                    continue;
                }
                let file = tree.pod.join("cgroup.freeze");
                if write_existing(&file, "1")? {
                    frozen.push((file, "0"));
                }
            }
            HierarchyKind::V1 { .. } if tree.hierarchy.has_v1_controller("freezer") => {
                let file = tree.pod.join("freezer.state");
                if write_existing(&file, "FROZEN")? {
                    wait_frozen(&file);
                    frozen.push((file, "THAWED"));
                }
            }
            HierarchyKind::V1 { .. } => {}
        }
    }
    Ok(frozen)
}

/// Waits (bounded) until a v1 freezer reports FROZEN.
fn wait_frozen(state: &Path) {
    let deadline = Instant::now() + FREEZE_WAIT;
    let mut delay = Duration::from_millis(1);
    while Instant::now() < deadline {
        match std::fs::read_to_string(state) {
            Ok(s) if s.trim() == "FROZEN" => return,
            Ok(_) => {}
            Err(_) => return,
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(MAX_POLL);
    }
}

fn thaw(frozen: &[(PathBuf, &'static str)]) -> Result<(), CgroupError> {
    for (file, value) in frozen {
        write_existing(file, value)?;
    }
    Ok(())
}

/// SIGKILLs every pid listed in any `cgroup.procs` of the trees.
fn kill_listed(trees: &[Tree<'_>], killed: &mut BTreeSet<i32>) -> Result<(), CgroupError> {
    for pid in listed_pids(trees)? {
        killed.insert(pid);
        signal(pid)?;
    }
    Ok(())
}

fn signal(pid: i32) -> Result<(), CgroupError> {
    match kill(Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(CgroupError::io("kill", format!("pid {pid}"), e.into())),
    }
}

/// Every pid listed in the `cgroup.procs` of every directory of every tree.
fn listed_pids(trees: &[Tree<'_>]) -> Result<BTreeSet<i32>, CgroupError> {
    let mut pids = BTreeSet::new();
    for dir in trees.iter().flat_map(|t| &t.dirs) {
        let file = dir.join("cgroup.procs");
        match std::fs::read_to_string(&file) {
            // Only positive pids: 0 would signal our own process group.
            Ok(s) => pids.extend(
                s.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .filter(|p| *p > 0),
            ),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(CgroupError::io("read", file, e)),
        }
    }
    Ok(pids)
}

/// rmdir with runc's EBUSY schedule. `Ok(false)` if it was already gone.
fn rmdir_retry(dir: &Path) -> Result<bool, CgroupError> {
    let mut delay = Duration::from_millis(1);
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(Errno::EBUSY as i32) && tries + 1 < RMDIR_TRIES => {
                tries += 1;
                std::thread::sleep(delay);
                delay *= 2;
            }
            Err(e) => return Err(CgroupError::io("rmdir", dir, e)),
        }
    }
}
