//! kubelet's results manager: the last published result per (container ID, probe type), with a
//! change notification only when the value changes (or is new).
//!
//! Keyed by container ID, as kubelet does, so a restarted container (new ID) starts clean and a
//! late result for an old instance cannot overwrite the new one's.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::model::outcome::ProbeResult;
use crate::spec::ProbeType;

/// The cache: per container ID, one slot per probe type. Looked up by `&str` so the per-probe
/// path allocates nothing; a key is made only when a container is first seen.
#[derive(Debug, Default)]
pub struct Results {
    cache: Mutex<HashMap<Arc<str>, [Option<ProbeResult>; 3]>>,
    /// Bumped (under the lock) by every change to the cache, so a writer that remembers the
    /// version after its own write knows, from one atomic load, that its slot still holds what
    /// it wrote ([`Results::set_memo`]).
    version: AtomicU64,
}

/// What one writer last put in its slot, and the cache's version just after: while the version
/// is unchanged, nothing in the cache changed, so writing the same result again is a no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotMemo {
    result: ProbeResult,
    version: u64,
}

impl Results {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `result`; true when it is new or differs from the cached value (kubelet sends an
    /// update only then).
    pub fn set(&self, container_id: &str, ty: ProbeType, result: ProbeResult) -> bool {
        self.write(container_id, ty, result).0
    }

    /// [`Results::set`] for a writer that keeps `memo` for this one slot (and clears it when its
    /// container changes): a steady result skips the lock and the hash of the container ID when
    /// the cache has not changed at all since this writer's last write, which is exactly when
    /// `set` would find the same value and return false.
    pub fn set_memo(
        &self,
        memo: &mut Option<SlotMemo>,
        container_id: &str,
        ty: ProbeType,
        result: ProbeResult,
    ) -> bool {
        if let Some(m) = memo
            && m.result == result
            && self.version.load(Ordering::Relaxed) == m.version
        {
            return false;
        }
        let (changed, version) = self.write(container_id, ty, result);
        *memo = Some(SlotMemo { result, version });
        changed
    }

    /// Writes `result`; whether it changed the slot, and the cache's version as this write left
    /// it (read under the lock, under which every change bumps it).
    fn write(&self, container_id: &str, ty: ProbeType, result: ProbeResult) -> (bool, u64) {
        let mut cache = self.cache.lock();
        let slots = match cache.get_mut(container_id) {
            Some(slots) => slots,
            None => cache.entry(Arc::from(container_id)).or_default(),
        };
        let old = slots[ty.index()].replace(result);
        let changed = old != Some(result);
        if changed {
            self.version.fetch_add(1, Ordering::Relaxed);
        }
        (changed, self.version.load(Ordering::Relaxed))
    }

    /// The cached result, if any.
    pub fn get(&self, container_id: &str, ty: ProbeType) -> Option<ProbeResult> {
        self.cache.lock().get(container_id)?[ty.index()]
    }

    /// Forgets a result without publishing anything (kubelet's `Remove`).
    pub fn remove(&self, container_id: &str, ty: ProbeType) {
        let mut cache = self.cache.lock();
        if let Some(slots) = cache.get_mut(container_id) {
            if slots[ty.index()].take().is_some() {
                self.version.fetch_add(1, Ordering::Relaxed);
            }
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

    #[test]
    fn a_memo_skips_only_what_set_would_not_change() {
        let r = Results::new();
        let mut memo = None;
        let (ty, ok) = (ProbeType::Liveness, ProbeResult::Success);
        assert!(r.set_memo(&mut memo, "c1", ty, ok), "new value");
        assert!(!r.set_memo(&mut memo, "c1", ty, ok), "same value");
        // Someone else removed the slot (an old worker of the same container exiting): the
        // memo must not hide that, the value is written and published again.
        r.remove("c1", ty);
        assert!(
            r.set_memo(&mut memo, "c1", ty, ok),
            "new again after remove"
        );
        assert_eq!(r.get("c1", ty), Some(ok));
        // Someone else overwrote the slot: written back, and reported as a change.
        assert!(r.set("c1", ty, ProbeResult::Failure));
        assert!(r.set_memo(&mut memo, "c1", ty, ok), "changed back");
        assert_eq!(r.get("c1", ty), Some(ok));
        // A change elsewhere in the cache only costs the lock: same answer as set.
        assert!(r.set("c2", ty, ok));
        assert!(!r.set_memo(&mut memo, "c1", ty, ok), "unchanged slot");
        assert!(
            r.set_memo(&mut memo, "c1", ty, ProbeResult::Failure),
            "a new result"
        );
        assert_eq!(r.get("c1", ty), Some(ProbeResult::Failure));
    }
}
