//! Assessing orphans' pod dirs for a pass: each walk on a blocking thread (never on the async
//! runtime, never under the lock `Status` and `Plan` take), a few at a time, each bounded by
//! [`WalkBounds`] and waited for no longer than its time bound plus [`RETURN_GRACE`]; the whole
//! lot by [`PASS_TIME`]. A walk stuck in a filesystem call (a hung NFS export, a FUSE daemon that
//! does not answer) costs its own orphan a "not assessed" finding, never the pass or the others;
//! its UID is not walked again until that walk has returned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;

use crate::decision::plan::Assessments;
use crate::node::mounts::MountTable;
use crate::node::pod_dir::{PodDir, WalkBounds, assess_removal_within};

/// Walks run at the same time (the node's disks, not its CPUs, are what they wait on).
pub const PARALLEL_WALKS: usize = 4;
/// How much longer than its time bound a walk is waited for (one slow `statx` or `getdents`
/// past the bound).
pub const RETURN_GRACE: Duration = Duration::from_secs(1);
/// The most one pass spends assessing pod dirs; dirs not started by then are assessed next pass.
pub const PASS_TIME: Duration = Duration::from_secs(10);

/// Runs pod dir assessments (see the module docs); remembers walks that outlived their wait.
#[derive(Debug, Default)]
pub struct Assessor {
    /// UIDs whose last walk has not returned yet.
    stuck: Arc<Mutex<HashSet<String>>>,
}

impl Assessor {
    /// An assessor with no walk in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Assesses `dirs` against `mounts`, each within `bounds`: every dir gets an answer, in at
    /// most about [`PASS_TIME`] plus one walk's wait.
    pub async fn assess_all(
        &self,
        dirs: Vec<PodDir>,
        mounts: Arc<MountTable>,
        bounds: WalkBounds,
    ) -> Assessments {
        let deadline = tokio::time::Instant::now() + PASS_TIME;
        futures::stream::iter(dirs)
            .map(|dir| {
                let mounts = mounts.clone();
                async move {
                    let uid = dir.uid.clone();
                    let answer = if tokio::time::Instant::now() >= deadline {
                        Err(format!(
                            "not assessed this pass: the pass's time for assessing pod \
                             directories ({PASS_TIME:?}) ran out; assessed next pass"
                        ))
                    } else {
                        self.assess_one(dir, mounts, bounds).await
                    };
                    (uid, answer)
                }
            })
            .buffer_unordered(PARALLEL_WALKS)
            .collect::<HashMap<_, _>>()
            .await
    }

    async fn assess_one(
        &self,
        dir: PodDir,
        mounts: Arc<MountTable>,
        bounds: WalkBounds,
    ) -> Result<crate::node::pod_dir::Removal, String> {
        let uid = dir.uid.clone();
        if self.stuck.lock().contains(&uid) {
            return Err(
                "not assessed this pass: the last walk of it has not returned yet (a filesystem \
                 call that does not answer?)"
                    .to_owned(),
            );
        }
        let done = Arc::new(AtomicBool::new(false));
        let (stuck, walk_done, walk_uid) = (self.stuck.clone(), done.clone(), uid.clone());
        let walk = tokio::task::spawn_blocking(move || {
            let r = assess_removal_within(&dir, &mounts, bounds);
            // Under the lock, so the waiter below either sees `done` or has already marked
            // the UID stuck, which is undone here.
            let mut stuck = stuck.lock();
            walk_done.store(true, Ordering::SeqCst);
            stuck.remove(&walk_uid);
            r
        });
        let wait = bounds.max_time + RETURN_GRACE;
        match tokio::time::timeout(wait, walk).await {
            Ok(Ok(Ok(removal))) => Ok(removal),
            Ok(Ok(Err(e))) => Err(format!("cannot assess it: {e}")),
            Ok(Err(e)) => Err(format!("cannot assess it: the walk's task failed: {e}")),
            Err(_) => {
                let mut stuck = self.stuck.lock();
                if !done.load(Ordering::SeqCst) {
                    stuck.insert(uid);
                }
                Err(format!(
                    "not assessed this pass: the walk did not return within {wait:?} (a \
                     filesystem call that does not answer?); assessed again once it has"
                ))
            }
        }
    }
}
