//! The plan's builder: one method per kind of thing found (cgroups, pod dirs, log dirs, leaked
//! sandboxes, exited containers), each turning what a source found into actions or findings with
//! their reasons and evidence, under the orphan rule, the UID gate and the listing caps.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use podward_api::housekeeper::v1::{Action, ActionKind, Finding, FindingKind, Outcome, Plan};

use super::category::Category;
use super::counts::Counts;
use super::op::Op;
use super::settings::{Assessments, MAX_FINDINGS, MAX_UIDS_PER_PASS, PlanSettings};
use crate::decision::orphan::{OrphanTracker, Verdict, human};
use crate::decision::uid_gate::{Cause, Closed, UidGate};
use crate::decision::{container_gc, sandbox};
use crate::node::cgroup::{CgroupLayout, PodCgroup};
use crate::node::kubelet_names::{self, Foreign};
use crate::node::log_dir::LogDir;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{DirScan, PodDir, mounted_volumes};
use crate::sources::runtime::RuntimeView;

pub(super) struct Builder<'a> {
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
    /// UIDs whose things a safety rule kept in this pass.
    kept: Vec<String>,
    counts: Counts,
    unlisted: usize,
}

fn finding(
    kind: FindingKind,
    category: Category,
    uid: &str,
    target: String,
    reason: String,
) -> Finding {
    Finding {
        kind: kind as i32,
        category: category.as_str().to_owned(),
        pod_uid: uid.to_owned(),
        target,
        reason,
    }
}

impl<'a> Builder<'a> {
    /// A builder for one pass: `allowed` are the UIDs it may act on, `assessed` the verdicts on
    /// their pod dirs.
    pub(super) fn new(
        tracker: &'a OrphanTracker,
        gate: &'a UidGate,
        now: Duration,
        settings: &'a PlanSettings,
        allowed: HashSet<String>,
        assessed: Assessments,
    ) -> Self {
        Self {
            tracker,
            gate,
            now,
            settings,
            actions: Vec::new(),
            findings: Vec::new(),
            allowed,
            assessed,
            kept: Vec::new(),
            counts: Counts::new(),
            unlisted: 0,
        }
    }

    /// Sorts what was built into `plan` and returns the ops (in the order of `plan.actions`),
    /// the counts and the UIDs a safety rule kept.
    pub(super) fn finish(self, plan: &mut Plan) -> (Vec<Op>, Counts, Vec<String>) {
        let Self {
            mut actions,
            mut findings,
            counts,
            unlisted,
            kept,
            ..
        } = self;
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
        (ops, counts, kept)
    }
}

impl Builder<'_> {
    /// Records a finding: always counted, listed only up to [`MAX_FINDINGS`]. The reason is only
    /// formatted when listed.
    fn note(
        &mut self,
        kind: FindingKind,
        category: Category,
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
    pub(super) fn foreign<T>(&mut self, category: Category, scan: &DirScan<T>) {
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

    fn list_foreign(&mut self, category: Category, target: String, why: &str) {
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
    fn orphan(&mut self, category: Category, uid: &str, target: &str) -> Option<String> {
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

    fn gated(&mut self, category: Category, uid: &str, target: &str) -> bool {
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
                Closed::BackingOff(Cause::Failed, d) => {
                    format!(
                        "backing off after a failed action; next try in {}",
                        human(d)
                    )
                }
                Closed::BackingOff(Cause::Kept, d) => {
                    format!(
                        "kept by a safety rule when last assessed; reassessed in {}",
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
        self.counts.add(Category::of(kind), false);
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

    pub(super) fn cgroups(
        &mut self,
        layout: &Arc<CgroupLayout>,
        pods: Vec<PodCgroup>,
        mounts: &MountTable,
    ) {
        for cg in pods {
            let Some(absence) = self.orphan(Category::Cgroup, &cg.uid, &cg.name) else {
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

    pub(super) fn pod_dirs(&mut self, dirs: Vec<PodDir>) {
        for dir in dirs {
            let target = dir.path.display().to_string();
            let Some(absence) = self.orphan(Category::PodDir, &dir.uid, &target) else {
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
                self.kept.push(dir.uid.clone());
                let reason = format!("orphaned pod directory kept: {why}");
                self.note(
                    FindingKind::Blocked,
                    Category::PodDir,
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

    pub(super) fn log_dirs(&mut self, dirs: Vec<LogDir>) {
        for dir in dirs {
            let target = dir.path.display().to_string();
            let Some(absence) = self.orphan(Category::LogDir, &dir.uid, &target) else {
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

    pub(super) fn sandboxes(&mut self, leaks: Vec<sandbox::Leak>, runtime: &RuntimeView) {
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
                self.list_foreign(Category::Sandbox, leak.sandbox_id, &why);
                continue;
            }
            if self.gated(Category::Sandbox, &leak.uid, &leak.sandbox_id) {
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

    pub(super) fn containers(&mut self, excess: Vec<container_gc::Excess>) {
        for e in excess {
            // kubelet's containers carry a pod UID label and a DNS-1123 name from a validated pod.
            let kubelets = kubelet_names::PodUid::parse(&e.uid)
                .and_then(|_| kubelet_names::check_container_name(&e.name));
            if let Err(why) = kubelets {
                self.list_foreign(Category::Container, e.container_id, &why.to_string());
                continue;
            }
            if !self.settings.remove_exited_containers {
                let reason = format!(
                    "{} (kubelet's container GC removes it; not enabled here)",
                    e.evidence
                );
                self.note(
                    FindingKind::Reported,
                    Category::Container,
                    &e.uid,
                    e.container_id,
                    || reason,
                );
                continue;
            }
            if self.gated(Category::Container, &e.uid, &e.container_id) {
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
