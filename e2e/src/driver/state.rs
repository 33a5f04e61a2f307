//! What the driver knows of a pod's containers: the state its [`super::Pod`] handle reads and its
//! sync loop writes, in a module of its own so that neither has to import the other.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Most restart counts remembered per container (memory stays bounded in long tests).
const MAX_SEEN: usize = 10_000;

/// What the driver knows of one container of the pod.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tracked {
    /// The current instance (the most recently created).
    pub(crate) id: Option<String>,
    /// Its attempt number (= restartCount).
    pub(crate) attempt: u32,
    /// Every restartCount observed, consecutive duplicates folded.
    pub(crate) seen: Vec<u32>,
    /// Exited for good (the restart policy said no).
    pub(crate) finished: bool,
}

/// Per-container state shared by the [`super::Pod`] handle and its sync loop.
#[derive(Debug, Default)]
pub(crate) struct PodState {
    containers: Mutex<BTreeMap<String, Tracked>>,
}

impl PodState {
    /// Runs `f` on the container's entry (created if missing).
    pub(crate) fn with<R>(&self, name: &str, f: impl FnOnce(&mut Tracked) -> R) -> R {
        let mut map = self.containers.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(name.to_owned()).or_default())
    }

    /// Records that `id`, restart `attempt` of `name`, was started.
    pub(crate) fn started(&self, name: &str, id: String, attempt: u32) {
        self.with(name, |t| {
            t.id = Some(id);
            t.attempt = attempt;
            t.finished = false;
            t.observe(attempt);
        });
    }

    /// A copy of the container's entry, if it has one.
    pub(crate) fn get(&self, name: &str) -> Option<Tracked> {
        let map = self.containers.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).cloned()
    }
}

impl Tracked {
    /// Records an observed restartCount.
    pub(crate) fn observe(&mut self, count: u32) {
        if self.seen.last() != Some(&count) && self.seen.len() < MAX_SEEN {
            self.seen.push(count);
        }
    }
}
