//! kubelet's results manager: the last published result per (container ID, probe type), with a
//! change notification only when the value changes (or is new).
//!
//! Keyed by container ID, as kubelet does, so a restarted container (new ID) starts clean and a
//! late result for an old instance cannot overwrite the new one's.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::spec::ProbeType;

/// A probe's result, kubelet's `results.Result`: what a probe yields (Success or Failure), what
/// a worker counts towards its thresholds, and what it caches and publishes once a threshold is
/// reached (where Unknown is startup's initial value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not determined yet (startup's initial value); never the result of a probe.
    Unknown,
    /// The probe passed.
    Success,
    /// The probe failed.
    Failure,
}

/// The cache: per container ID, one slot per probe type. Looked up by `&str` so the per-probe
/// path allocates nothing; a key is made only when a container is first seen.
#[derive(Debug, Default)]
pub struct Results {
    cache: Mutex<HashMap<Arc<str>, [Option<ProbeResult>; 3]>>,
}

impl Results {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `result`; true when it is new or differs from the cached value (kubelet sends an
    /// update only then).
    pub fn set(&self, container_id: &str, ty: ProbeType, result: ProbeResult) -> bool {
        let mut cache = self.cache.lock();
        let slots = match cache.get_mut(container_id) {
            Some(slots) => slots,
            None => cache.entry(Arc::from(container_id)).or_default(),
        };
        let old = slots[ty.index()].replace(result);
        old != Some(result)
    }

    /// The cached result, if any.
    pub fn get(&self, container_id: &str, ty: ProbeType) -> Option<ProbeResult> {
        self.cache.lock().get(container_id)?[ty.index()]
    }

    /// Forgets a result without publishing anything (kubelet's `Remove`).
    pub fn remove(&self, container_id: &str, ty: ProbeType) {
        let mut cache = self.cache.lock();
        if let Some(slots) = cache.get_mut(container_id) {
            slots[ty.index()] = None;
            if slots.iter().all(Option::is_none) {
                cache.remove(container_id);
            }
        }
    }

    /// Number of cached results.
    pub fn len(&self) -> usize {
        self.cache
            .lock()
            .values()
            .map(|s| s.iter().flatten().count())
            .sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_only_changes_and_remove_is_silent() {
        let r = Results::new();
        assert!(
            r.set("c1", ProbeType::Readiness, ProbeResult::Failure),
            "new value"
        );
        assert!(
            !r.set("c1", ProbeType::Readiness, ProbeResult::Failure),
            "same value"
        );
        assert!(
            r.set("c1", ProbeType::Readiness, ProbeResult::Success),
            "changed"
        );
        assert!(
            r.set("c1", ProbeType::Liveness, ProbeResult::Success),
            "other type is its own key"
        );
        r.remove("c1", ProbeType::Readiness);
        assert_eq!(r.get("c1", ProbeType::Readiness), None);
        assert!(
            r.set("c1", ProbeType::Readiness, ProbeResult::Success),
            "new again after remove"
        );
        assert_eq!(r.len(), 2);
        r.remove("c1", ProbeType::Readiness);
        r.remove("c1", ProbeType::Liveness);
        assert!(r.is_empty());
        assert!(
            r.cache.lock().is_empty(),
            "an emptied container's entry goes"
        );
    }
}
