//! What the planner is given: its settings from the config, the pod dir verdicts, and the bounds
//! on one pass.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::node::pod_dir::{Removal, WalkBounds};

/// At most this many orphaned UIDs are acted on in one pass; the rest wait for the next passes.
/// This bounds a pass's time, memory and blast radius when a node has a backlog of thousands of
/// orphans. Those that waited longest for a turn go first
/// ([`OrphanTracker::queue_key`](crate::decision::orphan::OrphanTracker::queue_key)), so every
/// orphan is assessed within `ceil(orphans / MAX_UIDS_PER_PASS)` passes.
pub const MAX_UIDS_PER_PASS: usize = 256;
/// At most this many findings are listed in a plan; the rest are counted in a summary finding
/// (and in the metrics), so the plan (an API response) stays bounded.
pub const MAX_FINDINGS: usize = 1000;

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

/// The verdict on each pod dir the pass may act on, by UID
/// ([`pod_dirs_to_assess`](super::pod_dirs_to_assess)); `Err` says why there is none (it could not
/// be read, or not in time), and the dir is kept.
pub type Assessments = HashMap<String, Result<Removal, String>>;
