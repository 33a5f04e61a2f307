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

use podward_api::housekeeper::v1::{Action, ActionKind, Finding, FindingKind, Outcome, Plan};

use crate::decision::orphan::{OrphanTracker, Verdict, human};
use crate::decision::uid_gate::{Closed, UidGate};
use crate::decision::{container_gc, sandbox};
use crate::node::cgroup::{CgroupLayout, PodCgroup};
use crate::node::kubelet_names::{self, Foreign};
use crate::node::log_dir::LogDir;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{DirScan, PodDir, Removal, WalkBounds, mounted_volumes};
use crate::sources::Snapshot;
use crate::sources::runtime::RuntimeView;

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

/// At most this many orphaned UIDs are acted on in one pass (the lowest UIDs first, so a dry run
/// and the real pass pick the same ones); the rest wait for the next passes. This bounds a pass's
/// time, memory and blast radius when a node has a backlog of thousands of orphans.
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
}

struct Builder<'a> {
    tracker: &'a OrphanTracker,
    gate: &'a UidGate,
    now: Duration,
    settings: &'a PlanSettings,
    actions: Vec<(Action, Op)>,
    findings: Vec<Finding>,
    /// UIDs that may be acted on in this pass (orphaned, gate open, within the per-pass cap).
    allowed: HashSet<String>,
    /// The verdicts on their pod dirs.
    assessed: Assessments,
    counts: Counts,
    unlisted: usize,
}

fn finding(
    kind: FindingKind,
    category: &str,
    uid: &str,
    target: String,
    reason: String,
) -> Finding {
    Finding {
        kind: kind as i32,
        category: category.to_owned(),
        pod_uid: uid.to_owned(),
        target,
        reason,
    }
}

impl Builder<'_> {
    /// Records a finding: always counted, listed only up to [`MAX_FINDINGS`]. The reason is only
    /// formatted when listed.
    fn note(
        &mut self,
        kind: FindingKind,
        category: &str,
        uid: &str,
        target: String,
        reason: impl FnOnce() -> String,
    ) {
        self.counts.add(category, kind == FindingKind::Blocked);
        if self.findings.len() >= MAX_FINDINGS {
            self.unlisted += 1;
            return;
        }
        self.findings
            .push(finding(kind, category, uid, target, reason()));
    }

    /// Lists what a scan found that is not kubelet's. Never counted as found (nothing of a pod's
    /// is there), only listed, within [`MAX_FINDINGS`], and counted as foreign.
    fn foreign<T>(&mut self, category: &str, scan: &DirScan<T>) {
        let n = scan.foreign.len() as u64 + scan.foreign_unlisted;
        self.counts.add_foreign(category, n);
        for Foreign { path, reason } in &scan.foreign {
            self.list_foreign(category, path.display().to_string(), reason);
        }
        if scan.foreign_unlisted > 0 {
            let reason = format!(
                "{} more entries not in kubelet's shapes (at most {} listed per root)",
                scan.foreign_unlisted,
                crate::node::pod_dir::MAX_FOREIGN
            );
            self.list_foreign(category, String::new(), &reason);
        }
    }

    fn list_foreign(&mut self, category: &str, target: String, why: &str) {
        if self.findings.len() >= MAX_FINDINGS {
            self.unlisted += 1;
            return;
        }
        let reason = format!("not kubelet's, never touched: {why}");
        self.findings
            .push(finding(FindingKind::Foreign, category, "", target, reason));
    }

    /// The orphan verdict and gate check for one candidate; `None` when it is not actionable now
    /// (a finding has been recorded if there is something to say).
    fn orphan(&mut self, category: &str, uid: &str, target: &str) -> Option<String> {
        match self.tracker.verdict(uid, self.now) {
            Verdict::Present => None,
            v @ Verdict::Waiting { .. } => {
                let grace = self.settings.orphan_grace;
                self.note(
                    FindingKind::Waiting,
                    category,
                    uid,
                    target.to_owned(),
                    || {
                        format!(
                            "{}; waiting for the grace period ({})",
                            v.evidence(uid),
                            human(grace)
                        )
                    },
                );
                None
            }
            v @ Verdict::Orphaned { .. } => {
                if self.gated(category, uid, target) {
                    return None;
                }
                if !self.allowed.contains(uid) {
                    self.note(FindingKind::Waiting, category, uid, target.to_owned(), || {
                        format!(
                            "{}; deferred: at most {MAX_UIDS_PER_PASS} orphaned pods are acted on per pass",
                            v.evidence(uid)
                        )
                    });
                    return None;
                }
                Some(v.evidence(uid))
            }
        }
    }

    fn gated(&mut self, category: &str, uid: &str, target: &str) -> bool {
        let closed = match self.gate.check(uid, self.now) {
            Ok(()) => return false,
            Err(c) => c,
        };
        self.note(
            FindingKind::Backoff,
            category,
            uid,
            target.to_owned(),
            || match closed {
                Closed::InFlight => "another action on this pod is still in flight".to_owned(),
                Closed::BackingOff(d) => {
                    format!(
                        "backing off after a failed action; next try in {}",
                        human(d)
                    )
                }
            },
        );
        true
    }

    fn act(
        &mut self,
        kind: ActionKind,
        uid: &str,
        target: String,
        reason: &str,
        evidence: Vec<String>,
        op: Op,
    ) {
        self.counts.add(category_of(kind), false);
        let action = Action {
            kind: kind as i32,
            pod_uid: uid.to_owned(),
            target,
            reason: reason.to_owned(),
            evidence,
            outcome: Outcome::Planned as i32,
            error: String::new(),
        };
        self.actions.push((action, op));
    }

    fn cgroups(&mut self, layout: &Arc<CgroupLayout>, pods: Vec<PodCgroup>, mounts: &MountTable) {
        for cg in pods {
            let Some(absence) = self.orphan(category::CGROUP, &cg.uid, &cg.name) else {
                continue;
            };
            let dir = PodDir {
                uid: cg.uid.clone(),
                path: self.settings.kubelet_root.join("pods").join(&cg.uid),
            };
            let mounted = mounted_volumes(&dir, mounts);
            let (uid, target) = (cg.uid.clone(), cg.name.clone());
            if mounted.is_empty() {
                let evidence = vec![
                    absence,
                    format!("nothing mounted under {}", dir.path.display()),
                ];
                let reason = "orphaned pod cgroup: kill its processes and remove it";
                let op = Op::DestroyCgroup {
                    layout: layout.clone(),
                    cgroup: cg,
                };
                self.act(ActionKind::RemoveCgroup, &uid, target, reason, evidence, op);
            } else {
                let mut evidence = vec![absence];
                evidence.extend(cap(mounted
                    .iter()
                    .map(|m| format!("{} is still mounted", m.display()))));
                let reason = "orphaned pod cgroup with volumes still mounted: lower its CPU to the \
                              minimum and keep it until they are unmounted";
                let op = Op::ReduceCpu {
                    layout: layout.clone(),
                    cgroup: cg,
                };
                self.act(ActionKind::ReduceCpu, &uid, target, reason, evidence, op);
            }
        }
    }

    fn pod_dirs(&mut self, dirs: Vec<PodDir>) {
        for dir in dirs {
            let target = dir.path.display().to_string();
            let Some(absence) = self.orphan(category::POD_DIR, &dir.uid, &target) else {
                continue;
            };
            let assessed = self.assessed.remove(&dir.uid).unwrap_or_else(|| {
                Err(
                    "not assessed this pass (found after the assessments); assessed next pass"
                        .to_owned(),
                )
            });
            let kept = match &assessed {
                // An error while checking counts as "possibly in use" (kubelet's podVolumesExist).
                Err(e) => Some(e.clone()),
                Ok(removal) => removal.kept_because(self.settings.walk),
            };
            if let Some(why) = kept {
                let reason = format!("orphaned pod directory kept: {why}");
                self.note(
                    FindingKind::Blocked,
                    category::POD_DIR,
                    &dir.uid,
                    target,
                    || reason,
                );
                continue;
            }
            let evidence = vec![
                absence,
                "nothing mounted at or under it; no file under volumes/ or volume-subpaths/"
                    .to_owned(),
            ];
            let uid = dir.uid.clone();
            let reason = "orphaned pod directory";
            self.act(
                ActionKind::RemovePodDir,
                &uid,
                target,
                reason,
                evidence,
                Op::RemovePodDir(dir),
            );
        }
    }

    fn log_dirs(&mut self, dirs: Vec<LogDir>) {
        for dir in dirs {
            let target = dir.path.display().to_string();
            let Some(absence) = self.orphan(category::LOG_DIR, &dir.uid, &target) else {
                continue;
            };
            let uid = dir.uid.clone();
            let reason = "orphaned pod log directory: no sandbox of its pod";
            self.act(
                ActionKind::RemoveLogDir,
                &uid,
                target,
                reason,
                vec![absence],
                Op::RemoveLogDir(dir),
            );
        }
    }

    fn sandboxes(&mut self, leaks: Vec<sandbox::Leak>, runtime: &RuntimeView) {
        for leak in leaks {
            // Only a sandbox kubelet made: its metadata comes from a validated pod. Another CRI
            // client's sandbox (crictl, a CI tool) is not ours to stop, leaked or not.
            let live = runtime.sandboxes.iter().find(|s| s.id == leak.sandbox_id);
            let kubelets = match live {
                Some(s) if s.uid != leak.uid => Err(format!(
                    "the shim's pod UID {:?} differs from the runtime's {:?}",
                    leak.uid, s.uid
                )),
                Some(s) => kubelet_names::check_pod(&s.namespace, &s.name, &s.uid)
                    .map(drop)
                    .map_err(|e| format!("sandbox metadata: {e}")),
                None => Err("not in the runtime's list".to_owned()),
            };
            if let Err(why) = kubelets {
                self.list_foreign(category::SANDBOX, leak.sandbox_id, &why);
                continue;
            }
            if self.gated(category::SANDBOX, &leak.uid, &leak.sandbox_id) {
                continue;
            }
            let reason = "leaked sandbox: kubelet never received it and has moved past it";
            let op = Op::RemoveSandbox(leak.sandbox_id.clone());
            self.act(
                ActionKind::RemoveSandbox,
                &leak.uid,
                leak.sandbox_id,
                reason,
                leak.evidence,
                op,
            );
        }
    }

    fn containers(&mut self, excess: Vec<container_gc::Excess>) {
        for e in excess {
            // kubelet's containers carry a pod UID label and a DNS-1123 name from a validated pod.
            let kubelets = kubelet_names::PodUid::parse(&e.uid)
                .and_then(|_| kubelet_names::check_container_name(&e.name));
            if let Err(why) = kubelets {
                self.list_foreign(category::CONTAINER, e.container_id, &why.to_string());
                continue;
            }
            if !self.settings.remove_exited_containers {
                let reason = format!(
                    "{} (kubelet's container GC removes it; not enabled here)",
                    e.evidence
                );
                self.note(
                    FindingKind::Reported,
                    category::CONTAINER,
                    &e.uid,
                    e.container_id,
                    || reason,
                );
                continue;
            }
            if self.gated(category::CONTAINER, &e.uid, &e.container_id) {
                continue;
            }
            let reason = "exited container beyond kubelet's GC policy";
            let op = Op::RemoveContainer(e.container_id.clone());
            self.act(
                ActionKind::RemoveContainer,
                &e.uid,
                e.container_id,
                reason,
                vec![e.evidence],
                op,
            );
        }
    }
}

/// At most this many evidence lines are listed per kind of observation.
const EVIDENCE_CAP: usize = 5;

fn cap(lines: impl Iterator<Item = String>) -> Vec<String> {
    let all: Vec<String> = lines.collect();
    let n = all.len();
    let mut out: Vec<String> = all.into_iter().take(EVIDENCE_CAP).collect();
    if n > EVIDENCE_CAP {
        out.push(format!("... and {} more", n - EVIDENCE_CAP));
    }
    out
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

/// The orphaned UIDs a pass may act on: gate open, lowest UIDs first, at most
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
        };
    };
    let mut b = Builder {
        tracker,
        gate,
        now,
        settings,
        actions: Vec::new(),
        findings: Vec::new(),
        allowed,
        assessed,
        counts: Counts::new(),
        unlisted: 0,
    };
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

    let Builder {
        mut actions,
        mut findings,
        counts,
        unlisted,
        ..
    } = b;
    // By pod, then kind: the act runs one pod's actions in this order (cgroup before pod dir,
    // as kubelet kills before it cleans).
    actions.sort_by(|(a, _), (b, _)| {
        (&a.pod_uid, a.kind, &a.target).cmp(&(&b.pod_uid, b.kind, &b.target))
    });
    findings.sort_by(|a, b| {
        (&a.category, &a.pod_uid, &a.target, a.kind).cmp(&(
            &b.category,
            &b.pod_uid,
            &b.target,
            b.kind,
        ))
    });
    if unlisted > 0 {
        findings.push(Finding {
            kind: FindingKind::Reported as i32,
            category: "summary".to_owned(),
            reason: format!(
                "{unlisted} more findings not listed (at most {MAX_FINDINGS} per plan)"
            ),
            ..Default::default()
        });
    }
    let (actions, ops) = actions.into_iter().unzip();
    plan.actions = actions;
    plan.findings = findings;
    PassPlan { plan, ops, counts }
}
