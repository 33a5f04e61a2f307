//! kubelet's results manager: the last published result per (container ID, probe type), with a
//! change notification only when the value changes (or is new).
//!
//! Keyed by container ID, as kubelet does, so a restarted container (new ID) starts clean and a
//! late result for an old instance cannot overwrite the new one's.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::spec::ProbeType;

/// A published probe result (kubelet's `results.Result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Not determined yet (startup's initial value).
    Unknown,
    /// The probe passed (at threshold).
    Success,
    /// The probe failed (at threshold).
    Failure,
}

/// The cache. One for all three probe types (the key carries the type).
#[derive(Debug, Default)]
pub struct Results {
    cache: Mutex<HashMap<(String, ProbeType), Outcome>>,
}

impl Results {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `outcome`; true when it is new or differs from the cached value (kubelet sends an
    /// update only then).
    pub fn set(&self, container_id: &str, ty: ProbeType, outcome: Outcome) -> bool {
        let mut cache = self.cache.lock();
        match cache.get_mut(&(container_id.to_owned(), ty)) {
            Some(old) if *old == outcome => false,
            Some(old) => {
                *old = outcome;
                true
            }
            None => {
                cache.insert((container_id.to_owned(), ty), outcome);
                true
            }
        }
    }

    /// The cached result, if any.
    pub fn get(&self, container_id: &str, ty: ProbeType) -> Option<Outcome> {
        self.cache
            .lock()
            .get(&(container_id.to_owned(), ty))
            .copied()
    }

    /// Forgets a result without publishing anything (kubelet's `Remove`).
    pub fn remove(&self, container_id: &str, ty: ProbeType) {
        self.cache.lock().remove(&(container_id.to_owned(), ty));
    }

    /// Number of cached results.
    pub fn len(&self) -> usize {
        self.cache.lock().len()
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
            r.set("c1", ProbeType::Readiness, Outcome::Failure),
            "new value"
        );
        assert!(
            !r.set("c1", ProbeType::Readiness, Outcome::Failure),
            "same value"
        );
        assert!(
            r.set("c1", ProbeType::Readiness, Outcome::Success),
            "changed"
        );
        assert!(
            r.set("c1", ProbeType::Liveness, Outcome::Success),
            "other type is its own key"
        );
        r.remove("c1", ProbeType::Readiness);
        assert_eq!(r.get("c1", ProbeType::Readiness), None);
        assert!(
            r.set("c1", ProbeType::Readiness, Outcome::Success),
            "new again after remove"
        );
        assert_eq!(r.len(), 2);
    }
}
