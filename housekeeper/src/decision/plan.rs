//! From one pass's reads (and the orphan history) to a plan: the actions to take, each with its
//! kind, target, reason and evidence, and the findings that are reported instead (waiting,
//! blocked, backing off, kubelet's job, and foreign: what is not in kubelet's name shapes, which
//! is never acted on).
//!
//! Planning reads no filesystem and never acts: the pod dirs it may act on
//! ([`pod_dirs_to_assess`]) are assessed before, off the async runtime
//! ([`crate::decision::assess`]), and their verdicts handed in. The plan is sorted, so a dry run
//! and the real pass that follows produce the same list.

use std::collections::HashSet;
use std::time::Duration;

use podward_api::housekeeper::v1::Plan;

use crate::decision::orphan::{OrphanTracker, Verdict};
use crate::decision::uid_gate::UidGate;
use crate::decision::{container_gc, sandbox};
use crate::node::pod_dir::PodDir;
use crate::sources::Snapshot;

mod builder;
mod category;
mod counts;
mod op;
mod settings;

use self::builder::Builder;
pub use self::category::Category;
pub use self::counts::{CategoryCount, Counts};
pub use self::op::Op;
pub use self::settings::{Assessments, MAX_FINDINGS, MAX_UIDS_PER_PASS, PlanSettings};

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
    b.foreign(Category::Cgroup, &cgroups.pods);
    b.cgroups(&cgroups.layout, cgroups.pods.found, &mounts);
    b.foreign(Category::PodDir, &pod_dirs);
    b.pod_dirs(pod_dirs.found);
    b.foreign(Category::LogDir, &log_dirs);
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
