//! Executing a plan: one pod's actions in order, pods in parallel (bounded), never two actions on
//! the same UID at once ([`UidGate`]), and the decisive facts re-read right before each
//! destructive step: the UID must still be absent from a fresh runtime list, and pod dirs are
//! removed against a fresh mount table.
//!
//! The actions layer: the only code that changes the node, on a plan the decision layer
//! ([`crate::decision`]) made. Telling the prober which pods are gone ([`prober_link`]) is an
//! effect of a pass too, so it lives here.

mod actuator;
mod node;
pub mod prober_link;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use podward_api::housekeeper::v1::{Finding, FindingKind, Outcome};

pub use self::actuator::Actuator;
pub use self::node::NodeActuator;
use crate::clock::Clock;
use crate::decision::plan::{Category, Op, PassPlan};
use crate::decision::uid_gate::{Cause, Closed, UidGate};
use crate::node::cgroup::CgroupError;
use crate::node::log_dir::LogDirError;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{PodDir, PodDirError, mounted_volumes};
use crate::sources::runtime::{ContainerPhase, RuntimeError, RuntimeView};
use crate::sources::{SourceError, Sources};

/// How many pods are worked on at the same time.
pub const PARALLEL_PODS: usize = 4;
/// A re-read runtime list or mount table older than this is read again before the next act.
pub const FRESH_FOR: Duration = Duration::from_millis(500);

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// Cgroup destroy or CPU reduction.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// Pod dir removal.
    #[error(transparent)]
    PodDir(#[from] PodDirError),
    /// Log dir removal.
    #[error(transparent)]
    LogDir(#[from] LogDirError),
    /// A CRI call.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Re-reading a source before acting.
    #[error("re-verification: {0}")]
    Verify(#[from] SourceError),
    /// The blocking task died.
    #[error("action task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A runtime list re-read before acting, with when it was read and its UIDs.
type FreshRuntime = (tokio::time::Instant, Arc<RuntimeView>, Arc<HashSet<String>>);
/// One pod's action results and the findings acting produced.
type GroupResult = (Vec<(usize, Step)>, Vec<Finding>);

/// The facts re-read before acting, cached for [`FRESH_FOR`].
struct Fresh<S> {
    sources: Arc<S>,
    runtime: tokio::sync::Mutex<Option<FreshRuntime>>,
    mounts: tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<MountTable>)>>,
}

impl<S: Sources> Fresh<S> {
    async fn runtime(&self) -> Result<(Arc<RuntimeView>, Arc<HashSet<String>>), SourceError> {
        let mut slot = self.runtime.lock().await;
        if let Some((at, v, u)) = slot.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return Ok((v.clone(), u.clone()));
        }
        let v = Arc::new(self.sources.runtime().await?);
        let u = Arc::new(v.uids());
        *slot = Some((tokio::time::Instant::now(), v.clone(), u.clone()));
        Ok((v, u))
    }

    async fn mounts(&self) -> Result<Arc<MountTable>, SourceError> {
        let mut slot = self.mounts.lock().await;
        if let Some((at, m)) = slot.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return Ok(m.clone());
        }
        let m = Arc::new(self.sources.mounts().await?);
        *slot = Some((tokio::time::Instant::now(), m.clone()));
        Ok(m)
    }
}

/// What happened to one action.
enum Step {
    /// Done; the notes (how it was done) are appended to the action's evidence.
    Done(Vec<String>),
    /// Not executed: a re-verified fact changed (no backoff: nothing failed).
    Skipped(String),
    Failed(ActError),
}

struct Ctx<S, A> {
    fresh: Fresh<S>,
    actuator: Arc<A>,
    kubelet_root: PathBuf,
}

impl<S: Sources, A: Actuator> Ctx<S, A> {
    async fn run(&self, uid: &str, op: Op, reported: &mut Vec<Finding>) -> Step {
        match self.verify(uid, &op).await {
            Ok(None) => {}
            Ok(Some(why)) => return Step::Skipped(why),
            Err(e) => return Step::Failed(e),
        }
        match self.apply(op, reported).await {
            Ok(notes) => Step::Done(notes),
            Err(e) => Step::Failed(e),
        }
    }

    /// `Some(reason)` when the action must not run any more.
    async fn verify(&self, uid: &str, op: &Op) -> Result<Option<String>, ActError> {
        if op.needs_uid_absent() {
            let (_, uids) = self.fresh.runtime().await?;
            if uids.contains(uid) {
                return Ok(Some(format!(
                    "skipped: uid {uid} now has a sandbox in the runtime"
                )));
            }
        }
        match op {
            Op::DestroyCgroup { .. } => {
                let mounts = self.fresh.mounts().await?;
                let dir = PodDir {
                    uid: uid.to_owned(),
                    path: self.kubelet_root.join("pods").join(uid),
                };
                let mounted = mounted_volumes(&dir, &mounts);
                if let Some(m) = mounted.first() {
                    return Ok(Some(format!("skipped: {} is now mounted", m.display())));
                }
            }
            Op::RemoveSandbox(id) => {
                let (rt, _) = self.fresh.runtime().await?;
                if !rt.sandboxes.iter().any(|s| &s.id == id) {
                    return Ok(Some(format!("skipped: sandbox {id} is already gone")));
                }
            }
            Op::RemoveContainer(id) => {
                let (rt, _) = self.fresh.runtime().await?;
                if !rt
                    .containers
                    .iter()
                    .any(|c| &c.id == id && c.phase == ContainerPhase::Exited)
                {
                    return Ok(Some(format!(
                        "skipped: container {id} is gone or no longer exited"
                    )));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    async fn apply(&self, op: Op, reported: &mut Vec<Finding>) -> Result<Vec<String>, ActError> {
        let a = self.actuator.clone();
        match op {
            Op::DestroyCgroup { layout, cgroup } => {
                let (uid, name) = (cgroup.uid.clone(), cgroup.name.clone());
                let res =
                    tokio::task::spawn_blocking(move || a.destroy_cgroup(&layout, &cgroup)).await?;
                let d_state = match &res {
                    Ok(r) => r.d_state.clone(),
                    Err(CgroupError::Busy { d_state, .. }) => d_state.clone(),
                    Err(_) => Vec::new(),
                };
                if !d_state.is_empty() {
                    reported.push(Finding {
                        kind: FindingKind::Reported as i32,
                        category: Category::Cgroup.as_str().to_owned(),
                        pod_uid: uid,
                        target: name,
                        reason: format!(
                            "processes in uninterruptible sleep (D state) cannot be killed: {d_state:?}; \
                             retried only after backoff"
                        ),
                    });
                }
                res.map(|r| r.notes).map_err(ActError::from)
            }
            Op::ReduceCpu { layout, cgroup } => {
                tokio::task::spawn_blocking(move || a.reduce_cpu(&layout, &cgroup)).await??;
                Ok(Vec::new())
            }
            Op::RemovePodDir(dir) => {
                let mounts = self.fresh.mounts().await?;
                tokio::task::spawn_blocking(move || a.remove_pod_dir(&dir, &mounts)).await??;
                Ok(Vec::new())
            }
            Op::RemoveLogDir(dir) => {
                let mounts = self.fresh.mounts().await?;
                tokio::task::spawn_blocking(move || a.remove_log_dir(&dir, &mounts)).await??;
                Ok(Vec::new())
            }
            Op::RemoveSandbox(id) => a
                .remove_sandbox(&id)
                .await
                .map(|()| Vec::new())
                .map_err(Into::into),
            Op::RemoveContainer(id) => a
                .remove_container(&id)
                .await
                .map(|()| Vec::new())
                .map_err(Into::into),
        }
    }
}

/// Executes `pass` (its outcomes are filled in) and returns findings the act itself produced
/// (D-state processes).
pub async fn execute<S: Sources, A: Actuator>(
    pass: &mut PassPlan,
    sources: Arc<S>,
    actuator: Arc<A>,
    gate: &UidGate,
    clock: &dyn Clock,
    kubelet_root: PathBuf,
) -> Vec<Finding> {
    let ctx = Ctx {
        fresh: Fresh {
            sources,
            runtime: tokio::sync::Mutex::new(None),
            mounts: tokio::sync::Mutex::new(None),
        },
        actuator,
        kubelet_root,
    };
    let groups = by_pod(pass);
    let ctx = &ctx;
    let results: Vec<GroupResult> = futures::stream::iter(groups)
        .map(|(uid, ops)| async move {
            let mut reported = Vec::new();
            let permit = match gate.acquire(&uid, clock.now()) {
                Ok(p) => p,
                Err(closed) => {
                    let why = match closed {
                        Closed::InFlight => {
                            "skipped: another action on this pod is in flight".to_owned()
                        }
                        Closed::BackingOff(Cause::Failed, _) => {
                            "skipped: backing off after a failure".to_owned()
                        }
                        Closed::BackingOff(Cause::Kept, _) => {
                            "skipped: kept by a safety rule, backing off".to_owned()
                        }
                    };
                    let out = ops
                        .into_iter()
                        .map(|(i, _)| (i, Step::Skipped(why.clone())))
                        .collect();
                    return (out, reported);
                }
            };
            let mut out = Vec::new();
            let mut failed = false;
            for (i, op) in ops {
                let r = ctx.run(&uid, op, &mut reported).await;
                failed |= matches!(r, Step::Failed(_));
                out.push((i, r));
            }
            if failed {
                gate.failed(&uid, clock.now());
            } else {
                gate.succeeded(&uid);
            }
            drop(permit);
            (out, reported)
        })
        .buffer_unordered(PARALLEL_PODS)
        .collect()
        .await;
    record(pass, results)
}

/// Takes `pass`'s ops, grouped by pod with each op's index in `plan.actions`. Actions are sorted
/// by UID, so consecutive runs are one pod's group.
fn by_pod(pass: &mut PassPlan) -> Vec<(String, Vec<(usize, Op)>)> {
    let ops = std::mem::take(&mut pass.ops);
    let mut groups: Vec<(String, Vec<(usize, Op)>)> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        let uid = pass.plan.actions[i].pod_uid.clone();
        match groups.last_mut() {
            Some((u, g)) if *u == uid => g.push((i, op)),
            _ => groups.push((uid, vec![(i, op)])),
        }
    }
    groups
}

/// Writes each step's outcome into its action and returns the findings the act produced.
fn record(pass: &mut PassPlan, results: Vec<GroupResult>) -> Vec<Finding> {
    let mut extra = Vec::new();
    for (outs, reported) in results {
        extra.extend(reported);
        for (i, r) in outs {
            let a = &mut pass.plan.actions[i];
            match r {
                Step::Done(notes) => {
                    a.outcome = Outcome::Done as i32;
                    a.evidence.extend(notes);
                }
                Step::Skipped(why) => a.error = why,
                Step::Failed(e) => {
                    a.outcome = Outcome::Failed as i32;
                    a.error = e.to_string();
                }
            }
        }
    }
    extra
}
