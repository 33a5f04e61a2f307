//! From one pass's reads (and the orphan history) to a plan: the actions to take, each with its
//! kind, target, reason and evidence, and the findings that are reported instead (waiting,
//! blocked, backing off, kubelet's job, and foreign: what is not in kubelet's name shapes, which
//! is never acted on).
//!
//! Planning reads no filesystem and never acts: the pod dirs it may act on
//! ([`pod_dirs_to_assess`]) are assessed before, off the async runtime ([`crate::decision::assess`]), and
//! their verdicts handed in. The plan is sorted, so a dry run and the real pass that follows
//! produce the same list.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::{ActionKind, Plan};

use crate::decision::orphan::{OrphanTracker, Verdict};
use crate::decision::uid_gate::UidGate;
use crate::decision::{container_gc, sandbox};
use crate::node::cgroup::{CgroupLayout, PodCgroup};
use crate::node::log_dir::LogDir;
use crate::node::pod_dir::{PodDir, Removal, WalkBounds};
use crate::sources::Snapshot;

mod builder;

use self::builder::Builder;

/// Category names (findings, metrics).
pub mod category {
    /// Pod cgroups.
    pub const CGROUP: &str = "cgroup";
    /// Pod directories.
    pub const POD_DIR: &str = "pod_dir";
    /// Pod log directories.
    pub const LOG_DIR: &str = "log_dir";
    /// Leaked sandboxes.
    pub const SANDBOX: &str = "sandbox";
    /// Exited containers beyond kubelet's GC policy.
    pub const CONTAINER: &str = "container";
    /// Every category, for metrics.
    pub const ALL: [&str; 5] = [CGROUP, POD_DIR, LOG_DIR, SANDBOX, CONTAINER];
}

/// The category an action kind belongs to.
pub fn category_of(kind: ActionKind) -> &'static str {
    match kind {
        ActionKind::RemoveCgroup | ActionKind::ReduceCpu => category::CGROUP,
        ActionKind::RemovePodDir => category::POD_DIR,
        ActionKind::RemoveLogDir => category::LOG_DIR,
        ActionKind::RemoveSandbox => category::SANDBOX,
        ActionKind::RemoveContainer | ActionKind::Unspecified => category::CONTAINER,
    }
}

/// At most this many orphaned UIDs are acted on in one pass; the rest wait for the next passes.
/// This bounds a pass's time, memory and blast radius when a node has a backlog of thousands of
/// orphans. Those that waited longest for a turn go first ([`OrphanTracker::queue_key`]), so every
/// orphan is assessed within `ceil(orphans / MAX_UIDS_PER_PASS)` passes.
pub const MAX_UIDS_PER_PASS: usize = 256;
/// At most this many findings are listed in a plan; the rest are counted in a summary finding
/// (and in the metrics), so the plan (an API response) stays bounded.
pub const MAX_FINDINGS: usize = 1000;

/// Per category: everything found (actions, findings, deferred), blocked, and foreign, before
/// any listing cap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// One entry for every category, in [`category::ALL`] order.
    pub by_category: Vec<CategoryCount>,
}

/// The counts of one category in one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CategoryCount {
    /// The category ([`category::ALL`]).
    pub category: &'static str,
    /// Orphans and leaks found (planned, waiting, blocked or reported).
    pub found: u64,
    /// Of those, kept by a safety rule.
    pub blocked: u64,
    /// Entries under the category's root that are not in kubelet's shapes (never acted on): many of
    /// them usually means a root flag points at the wrong directory.
    pub foreign: u64,
}

impl Counts {
    fn new() -> Self {
        Self {
            by_category: category::ALL
                .iter()
                .map(|c| CategoryCount {
                    category: c,
                    found: 0,
                    blocked: 0,
                    foreign: 0,
                })
                .collect(),
        }
    }

    fn entry(&mut self, cat: &str) -> Option<&mut CategoryCount> {
        self.by_category.iter_mut().find(|e| e.category == cat)
    }

    fn add(&mut self, cat: &str, blocked: bool) {
        if let Some(e) = self.entry(cat) {
            e.found += 1;
            e.blocked += u64::from(blocked);
        }
    }

    fn add_foreign(&mut self, cat: &str, n: u64) {
        if let Some(e) = self.entry(cat) {
            e.foreign += n;
        }
    }
}

/// Settings the planner needs from the config.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// kubelet's root dir (pod dirs are `<root>/pods/<uid>`).
    pub kubelet_root: PathBuf,
    /// Plan removal of exited containers beyond kubelet's policy (else report them).
    pub remove_exited_containers: bool,
    /// The grace period (for messages).
    pub orphan_grace: Duration,
    /// How much one pod dir assessment may walk.
    pub walk: WalkBounds,
}

/// The verdict on each pod dir the pass may act on, by UID ([`pod_dirs_to_assess`]); `Err` says
/// why there is none (it could not be read, or not in time), and the dir is kept.
pub type Assessments = HashMap<String, Result<Removal, String>>;

/// What executing one action does (the data the act needs, beside the wire `Action`).
#[derive(Clone, Debug)]
pub enum Op {
    /// Kill and remove an orphan's pod cgroup.
    DestroyCgroup {
        /// Where it lives.
        layout: Arc<CgroupLayout>,
        /// The cgroup.
        cgroup: PodCgroup,
    },
    /// Lower an orphan's CPU (volumes still mounted).
    ReduceCpu {
        /// Where it lives.
        layout: Arc<CgroupLayout>,
        /// The cgroup.
        cgroup: PodCgroup,
    },
    /// Remove an orphan's pod dir.
    RemovePodDir(PodDir),
    /// Remove an orphan's log dir.
    RemoveLogDir(LogDir),
    /// Stop and remove a leaked sandbox.
    RemoveSandbox(String),
    /// Remove an exited container.
    RemoveContainer(String),
}

impl Op {
    /// Whether the act must first re-verify that the UID is still absent from the runtime
    /// (every orphan rule; not leaked sandboxes or containers, whose pod is present by nature).
    pub fn needs_uid_absent(&self) -> bool {
        !matches!(self, Op::RemoveSandbox(_) | Op::RemoveContainer(_))
    }
}

/// A plan and, in the same order as `plan.actions`, what to do for each action.
#[derive(Debug)]
pub struct PassPlan {
    /// The wire plan.
    pub plan: Plan,
    /// `ops[i]` executes `plan.actions[i]`.
    pub ops: Vec<Op>,
    /// Found and blocked per category, before the listing caps.
    pub counts: Counts,
    /// The orphaned UIDs this pass took a turn on ([`MAX_UIDS_PER_PASS`] at most).
    pub turns: Vec<String>,
    /// Of those, the UIDs whose things a safety rule kept: reassessed after a backoff.
    pub kept: Vec<String>,
}

/// UIDs that own something on the node (cgroup, pod dir, log dir): the orphan candidates.
pub fn candidates(snapshot: &Snapshot) -> Vec<&str> {
    let mut uids: Vec<&str> = Vec::new();
    if let Some(c) = &snapshot.cgroups {
        uids.extend(c.pods.found.iter().map(|p| p.uid.as_str()));
    }
    if let Some(d) = &snapshot.pod_dirs {
        uids.extend(d.found.iter().map(|p| p.uid.as_str()));
    }
    if let Some(d) = &snapshot.log_dirs {
        uids.extend(d.found.iter().map(|p| p.uid.as_str()));
    }
    uids
}

/// UIDs with anything in the runtime.
pub fn present(snapshot: &Snapshot) -> HashSet<String> {
    snapshot
        .runtime
        .as_ref()
        .map(|r| r.uids())
        .unwrap_or_default()
}

/// The orphaned UIDs a pass may act on: gate open, longest wait for a turn first, at most
/// [`MAX_UIDS_PER_PASS`].
fn allowed_uids(
    snapshot: &Snapshot,
    tracker: &OrphanTracker,
    gate: &UidGate,
    now: Duration,
) -> HashSet<String> {
    let cgroups = snapshot.cgroups.iter().flat_map(|c| &c.pods.found);
    let pod_dirs = snapshot.pod_dirs.iter().flat_map(|d| &d.found);
    let log_dirs = snapshot.log_dirs.iter().flat_map(|d| &d.found);
    let mut orphaned: Vec<&str> = cgroups
        .map(|p| p.uid.as_str())
        .chain(pod_dirs.map(|d| d.uid.as_str()))
        .chain(log_dirs.map(|d| d.uid.as_str()))
        .filter(|u| matches!(tracker.verdict(u, now), Verdict::Orphaned { .. }))
        .filter(|u| gate.check(u, now).is_ok())
        .collect();
    orphaned.sort_unstable();
    orphaned.dedup();
    orphaned.sort_by_key(|u| tracker.queue_key(u));
    orphaned
        .into_iter()
        .take(MAX_UIDS_PER_PASS)
        .map(str::to_owned)
        .collect()
}

/// The pod dirs [`build`] may plan to remove this pass, which it needs assessed (`tracker`
/// already holding this pass's observation); none when a required source failed.
pub fn pod_dirs_to_assess(
    snapshot: &Snapshot,
    tracker: &OrphanTracker,
    gate: &UidGate,
    now: Duration,
) -> Vec<PodDir> {
    if !snapshot.required_ok() {
        return Vec::new();
    }
    let allowed = allowed_uids(snapshot, tracker, gate, now);
    snapshot
        .pod_dirs
        .iter()
        .flat_map(|d| &d.found)
        .filter(|d| allowed.contains(&d.uid))
        .cloned()
        .collect()
}

/// Builds the plan for `snapshot`, with the verdicts on the pod dirs [`pod_dirs_to_assess`]
/// named. `tracker` must already hold this pass's observation. When a required source failed,
/// the plan holds no action and no finding.
pub fn build(
    snapshot: Snapshot,
    assessed: Assessments,
    tracker: &OrphanTracker,
    gate: &UidGate,
    now: Duration,
    settings: &PlanSettings,
) -> PassPlan {
    let mut plan = Plan {
        computed_at_ns: podward_api::time::now_ns(),
        sources_ok: snapshot.required_ok(),
        ..Default::default()
    };
    let allowed = allowed_uids(&snapshot, tracker, gate, now);
    let Snapshot {
        cgroups,
        cgroup_driver,
        runtime,
        shim,
        pod_dirs,
        log_dirs,
        mounts,
        reports,
    } = snapshot;
    plan.sources = reports;
    plan.cgroup_driver = cgroup_driver;
    let (Some(cgroups), Some(runtime), Some(pod_dirs), Some(log_dirs), Some(mounts), true) = (
        cgroups,
        runtime,
        pod_dirs,
        log_dirs,
        mounts,
        plan.sources_ok,
    ) else {
        return PassPlan {
            plan,
            ops: Vec::new(),
            counts: Counts::default(),
            turns: Vec::new(),
            kept: Vec::new(),
        };
    };
    let mut turns: Vec<String> = allowed.iter().cloned().collect();
    turns.sort_unstable();
    let mut b = Builder::new(tracker, gate, now, settings, allowed, assessed);
    b.foreign(category::CGROUP, &cgroups.pods);
    b.cgroups(&cgroups.layout, cgroups.pods.found, &mounts);
    b.foreign(category::POD_DIR, &pod_dirs);
    b.pod_dirs(pod_dirs.found);
    b.foreign(category::LOG_DIR, &log_dirs);
    b.log_dirs(log_dirs.found);
    if let Some(shim) = &shim {
        b.sandboxes(sandbox::leaked_sandboxes(&runtime, shim), &runtime);
    }
    b.containers(container_gc::exited_beyond_policy(&runtime));
    let (ops, counts, kept) = b.finish(&mut plan);
    PassPlan {
        plan,
        ops,
        counts,
        turns,
        kept,
    }
}
